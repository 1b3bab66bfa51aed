//! The fuzz corpus of the protocol core (`fuzz/corpus/core/`, grown by `make fuzz`) replayed as
//! a plain test, so every input the fuzzer found interesting stays a regression test in
//! `make test`; and the hand-written seeds, checked to reach the states they were written for
//! (a seed that silently stopped early, after a change of the script format, would seed
//! nothing).

use std::path::{Path, PathBuf};

use crate::fuzz::{self, op, Reached, Script};
use crate::Role;

fn corpus_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../fuzz/corpus/core")
}

#[test]
fn corpus_replays_without_panics() {
    let dir = corpus_dir();
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("the fuzz corpus {} is missing: {e}", dir.display()))
        .map(|entry| entry.expect("a directory entry").path())
        .filter(|path| path.is_file())
        .collect();
    assert!(
        !files.is_empty(),
        "the fuzz corpus {} is empty: nothing would be tested",
        dir.display()
    );
    files.sort();
    let mut failed = Vec::new();
    for path in &files {
        let data = std::fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        if std::panic::catch_unwind(|| fuzz::drive(&data)).is_err() {
            failed.push(path.display().to_string());
        }
    }
    assert!(
        failed.is_empty(),
        "{} of {} corpus inputs panicked (messages above): {failed:#?}",
        failed.len(),
        files.len()
    );
}

/// Hello of a [`Script`]: 4 slots of 256 bytes each side, so one frame carries 216 bytes.
const ROOM: u8 = 27; // 216 / 8, a split byte

/// A hand-written seed: its script, and the events, emitted frames and expiries it must
/// reach.
struct Seed {
    name: &'static str,
    script: Vec<u8>,
    events: Vec<&'static str>,
    sent: Vec<&'static str>,
    expired: Vec<&'static str>,
}

fn seed(
    name: &'static str,
    script: Script,
    events: &[&'static str],
    sent: &[&'static str],
) -> Seed {
    Seed {
        name,
        script: script.into_bytes(),
        events: events.to_vec(),
        sent: sent.to_vec(),
        expired: Vec::new(),
    }
}

impl Seed {
    /// The expiries it must reach ([`op::TIME`]).
    fn expiring(mut self, expired: &[&'static str]) -> Seed {
        self.expired = expired.to_vec();
        self
    }
}

/// Prologue bits of [`Script::timers`]: keepalive every 10 ms (given up after 50 ms of
/// silence), a stall timeout of 5 ms.
const KEEPALIVE_10MS: u8 = 1 << 3;
const STALL_5MS: u8 = 1 << 5;

fn seeds() -> Vec<Seed> {
    vec![
        seed(
            "client-unary",
            Script::new(Role::Client)
                .op(op::OPEN, &[])
                // MESSAGE OPEN|END, 4 bytes in its buffer, method 7, timeout 5 ms.
                .op(op::SEND_MESSAGE, &[0, 2, 4, 7, 5])
                // The reply: MESSAGE END of 24 bytes returning one credit.
                .op(op::SYNTH, &[1, 0, 2 | 1 << 3, 0, 1, 0])
                .op(op::RELEASE, &[0])
                .op(op::POLL, &[0]),
            &["MessageEnd"],
            &["MESSAGE"],
        ),
        seed(
            "server-whole-request",
            Script::new(Role::Server)
                // The client's offer of whole requests (PING RP-X, bit 0), answered.
                .op(op::SYNTH, &[6, 0xff, 0, 1, 0])
                .op(op::RELEASE, &[0])
                .op(op::POLL, &[0])
                // MESSAGE OPEN|END|METADATA opening call 1 (method 9): a block of one
                // 8-byte entry, then 48 bytes.
                .op(op::SYNTH, &[1, 0x80, 3 | 8, 9, 0, 1, 0, 1, 2, 0])
                .op(op::RELEASE, &[0])
                .op(op::SEND_MESSAGE, &[0, 2, 6, 0, 0])
                .op(op::POLL, &[0]),
            &["MessageEnd"],
            &["PING", "MESSAGE"],
        ),
        seed(
            "server-shared-credits",
            Script::new(Role::Server)
                .pooled()
                // The client's offer of whole requests and shared credits (bits 0 and 1),
                // answered.
                .op(op::SYNTH, &[6, 0xff, 0, 3, 0])
                .op(op::RELEASE, &[0])
                .op(op::POLL, &[0])
                // Three unary requests, slots held: the third leaves the client one credit,
                // so its grant doubles and a CREDIT carries the raise.
                .op(op::SYNTH, &[1, 0x80, 3, 9, 2, 0])
                .op(op::SYNTH, &[1, 0x80, 3, 9, 2, 0])
                .op(op::SYNTH, &[1, 0x80, 3, 9, 2, 0])
                .op(op::POLL, &[0]),
            &["MessageEnd", "MessageEnd", "MessageEnd"],
            &["PING", "CREDIT"],
        ),
        seed(
            "server-unary",
            Script::new(Role::Server)
                // MESSAGE OPEN|END opening call 1 (method 9), 48 bytes.
                .op(op::SYNTH, &[1, 0x80, 3, 9, 2, 0])
                .op(op::RELEASE, &[0])
                // The reply, MESSAGE END, returning the request's credit.
                .op(op::SEND_MESSAGE, &[0, 2, 6, 0, 0])
                .op(op::POLL, &[0]),
            &["MessageEnd"],
            &["MESSAGE"],
        ),
        seed(
            "client-streaming",
            Script::new(Role::Client)
                .op(op::OPEN, &[])
                // HEADERS OPEN with two entries, then a 200-byte and a 640-byte MESSAGE (cut
                // into three segments), then END.
                .op(op::SEND_HEADERS, &[0, 0, 3, 1, 2, 0, 1, 1, 2])
                .op(op::SEND_MESSAGE, &[0, 0, 0x85, 0, 0])
                .op(op::SEND_MESSAGE, &[0, 0, 0x90, 0, 0])
                .op(op::SEND_END, &[0, 0, 0, 0])
                .op(op::POLL, &[0])
                // The server returns three credits.
                .op(op::SYNTH, &[5, 0, 3 << 3, 0, 0])
                .op(op::POLL, &[0])
                // Response headers (one entry), returning a credit.
                .op(op::SYNTH, &[0, 0, 1 << 3, 0, 0, 1, 0, 1, 0])
                .op(op::RELEASE, &[3])
                .op(op::POLL, &[0])
                // A 528-byte MESSAGE in three segments, consumed: a WINDOW returns it.
                .op(op::SYNTH, &[1, 0, 1 << 3, 0, 22, ROOM])
                .op(op::RELEASE, &[3])
                .op(op::POLL, &[0])
                .op(op::CONTINUE, &[0, ROOM, 0])
                .op(op::CONTINUE, &[0, ROOM, 0])
                .op(op::CONSUME, &[0, 255])
                .op(op::RELEASE, &[3])
                .op(op::POLL, &[0])
                // END with trailers: code 0, one entry.
                .op(op::SYNTH, &[2, 0, 1 << 3, 0, 0, 1, 1, 2, 0])
                .op(op::RELEASE, &[3])
                .op(op::POLL, &[0]),
            &["Headers", "Message", "Ended"],
            &[
                "HEADERS", "MESSAGE", "MESSAGE", "MESSAGE", "MESSAGE", "END", "CREDIT", "WINDOW",
            ],
        ),
        seed(
            "cancel",
            Script::new(Role::Client)
                .op(op::OPEN, &[])
                .op(op::SEND_MESSAGE, &[0, 0, 8, 1, 0])
                // Cancelled (reason CANCELLED), then the server's reply crosses the CANCEL.
                .op(op::CANCEL, &[0, 1])
                .op(op::POLL, &[0])
                .op(op::SYNTH, &[1, 0, 2 | 2 << 3, 0, 1, 0])
                // A second call, cancelled by the server.
                .op(op::OPEN, &[])
                .op(op::SEND_MESSAGE, &[0, 2, 8, 1, 0])
                .op(op::SYNTH, &[3, 0, 0, 1, 0])
                .op(op::RELEASE, &[3])
                .op(op::POLL, &[0]),
            &["Cancelled"],
            &["MESSAGE", "CANCEL", "MESSAGE", "CREDIT"],
        ),
        seed(
            "server-goodbye",
            Script::new(Role::Server)
                // HEADERS OPEN (one entry) opening call 1, then a PING.
                .op(op::SYNTH, &[0, 0x80, 1, 4, 0, 1, 0, 1, 0])
                .op(op::SYNTH, &[6, 1, 0, 2, 0])
                .op(op::RELEASE, &[1])
                // Our PING, the answer to theirs, our GOODBYE.
                .op(op::PING, &[3])
                .op(op::GOODBYE, &[])
                .op(op::POLL, &[0])
                // END INVALID_ARGUMENT, a 2,000-character message, details and trailers.
                .op(op::END_CALL, &[0, 3, 0xd0, 0x07, 1, 2, 3, 3])
                .op(op::POLL, &[0])
                .op(op::SYNTH, &[5, 0, 7 << 3, 0, 0])
                .op(op::POLL, &[0])
                .op(op::SYNTH, &[5, 0, 7 << 3, 0, 0])
                .op(op::POLL, &[0])
                // The client opens call 2 after the GOODBYE: END UNAVAILABLE.
                .op(op::SYNTH, &[1, 0x80, 1 | 3 << 3, 4, 1, 0])
                .op(op::RELEASE, &[3])
                .op(op::POLL, &[0]),
            &["Opened"],
            // The trailers in five segments, then call 2's END UNAVAILABLE.
            &[
                "PING", "PING", "GOODBYE", "END", "END", "END", "END", "END", "END",
            ],
        ),
        seed(
            "decoders",
            Script::new(Role::Server)
                .op(op::PARSE, &parse_args(&hello_frame()))
                .op(op::PARSE, &parse_args(&hello_frame()[40..]))
                .op(op::PARSE, &parse_args(&[1, 0, b'k', 1, 0, 0, 0, b'v']))
                .op(op::PARSE, &parse_args(b"100%25 caf%C3%A9%0A"))
                .op(
                    op::FEED_WILD,
                    &[3, 3, 0, 0x80, 0, 0, 0, 0, 0, 4, 0, 0, 4, 2],
                ),
            &["MessageEnd"],
            &[],
        ),
        seed(
            "client-deadline",
            Script::new(Role::Client)
                .op(op::OPEN, &[])
                // MESSAGE OPEN|END with a timeout of 5 ms: the client's deadline.
                .op(op::SEND_MESSAGE, &[0, 2, 4, 7, 5])
                .op(op::TIME, &[4])
                .op(op::POLL, &[0])
                // It passes: the call is cancelled with DEADLINE_EXCEEDED.
                .op(op::TIME, &[1])
                .op(op::POLL, &[0])
                // The server's reply crossed the CANCEL: dropped.
                .op(op::SYNTH, &[1, 0, 2 | 1 << 3, 0, 1, 0]),
            &[],
            &["MESSAGE", "CANCEL"],
        )
        .expiring(&["Deadline"]),
        seed(
            "server-deadline",
            Script::new(Role::Server)
                // MESSAGE OPEN|END opening call 1 with a timeout of 9 ms.
                .op(op::SYNTH, &[1, 0x80, 3, 9, 2, 0])
                .op(op::RELEASE, &[0])
                .op(op::TIME, &[9])
                // END DEADLINE_EXCEEDED; the handler's late reply goes nowhere.
                .op(op::POLL, &[0])
                .op(op::SEND_MESSAGE, &[0, 2, 6, 0, 0])
                .op(op::POLL, &[0]),
            &["MessageEnd"],
            &["END"],
        )
        .expiring(&["Deadline"]),
        seed(
            "keepalive",
            Script::new(Role::Client)
                .timers(KEEPALIVE_10MS)
                // The first tick starts keepalive; 10 ms of silence send a PING.
                .op(op::TIME, &[0])
                .op(op::TIME, &[10])
                .op(op::POLL, &[0])
                // The answer keeps the peer alive past the 50 ms.
                .op(op::SYNTH, &[6, 0, 4, 0, 0])
                .op(op::TIME, &[40])
                .op(op::TIME, &[10])
                .op(op::POLL, &[0])
                // No answer this time: the peer is given up.
                .op(op::TIME, &[40])
                .op(op::POLL, &[0]),
            &["Pong"],
            &["PING", "PING"],
        )
        .expiring(&["PeerSilent"]),
        seed(
            "client-stall",
            Script::new(Role::Client)
                .timers(STALL_5MS)
                .op(op::OPEN, &[])
                .op(op::SEND_MESSAGE, &[0, 2, 4, 7, 0])
                .op(op::POLL, &[0])
                // The first 216 bytes of a 528-byte reply, then nothing for 5 ms: the call
                // is cancelled with RESOURCE_EXHAUSTED.
                .op(op::SYNTH, &[1, 0, 0, 0, 22, ROOM])
                .op(op::TIME, &[0])
                .op(op::TIME, &[5])
                .op(op::RELEASE, &[3])
                .op(op::POLL, &[0]),
            &[],
            &["MESSAGE", "CANCEL"],
        )
        .expiring(&["Stalled"]),
    ]
}

/// A HELLO frame as a peer opening a TCP connection sends it.
fn hello_frame() -> Vec<u8> {
    crate::conn::tests::hello().to_frame().to_vec()
}

/// The arguments of [`op::PARSE`] for `bytes`.
fn parse_args(bytes: &[u8]) -> Vec<u8> {
    let mut args = (bytes.len() as u16).to_le_bytes().to_vec();
    args.extend_from_slice(bytes);
    args
}

fn check(s: &Seed, reached: &Reached) {
    let name = s.name;
    assert_eq!(reached.error, None, "seed {name}: {reached:#?}");
    assert_eq!(reached.events, s.events, "seed {name}: {reached:#?}");
    assert_eq!(reached.sent, s.sent, "seed {name}: {reached:#?}");
    assert_eq!(reached.expired, s.expired, "seed {name}: {reached:#?}");
}

#[test]
fn seeds_reach_their_states() {
    for s in seeds() {
        check(&s, &fuzz::run(&s.script));
    }
}

/// Writes the seeds into the corpus directory: `cargo test -p rpc-proto --lib corpus --
/// --ignored write_seeds`.
#[test]
#[ignore = "writes files: run by hand to reseed the corpus"]
fn write_seeds() {
    let dir = corpus_dir();
    std::fs::create_dir_all(&dir).expect("corpus directory");
    for s in seeds() {
        std::fs::write(dir.join(format!("seed-{}", s.name)), s.script).expect("seed written");
    }
}
