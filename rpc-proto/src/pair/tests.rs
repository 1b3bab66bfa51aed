//! The races and timers users meet, played deterministically on the pair's virtual clock.

use std::time::Duration;

use super::{Pair, Seen};
use crate::conn::tests::{hello, out};
use crate::{flags, metadata, Code, Keepalive, Kind, Role, SendError};

const MS: Duration = Duration::from_millis(1);

/// The server dies silently (nothing it sends arrives any more): how long the client takes
/// to give it up, in steps of 250 ms; fails if it does not within `limit`.
fn silence_until_given_up(pair: &mut Pair, limit: Duration) -> Duration {
    pair.server.cut_off = true;
    let died = pair.now;
    while pair.now < died + limit {
        pair.advance(250 * MS);
        if pair.client.take_seen().contains(&Seen::PeerSilent) {
            return pair.now - died;
        }
    }
    panic!("the client did not give the dead server up within {limit:?}");
}

#[test]
fn a_deadline_ends_the_call_at_both_ends_at_the_same_virtual_instant() {
    let mut pair = Pair::new();
    let call = pair.call(5, b"ping", Some(100 * MS));
    pair.drive();
    assert_eq!(
        pair.server.take_seen(),
        vec![Seen::Message(call, b"ping".to_vec(), true, None)]
    );
    assert_eq!(pair.server.core.deadline(call), Some(pair.now + 100 * MS));

    pair.advance(99 * MS);
    assert!(pair.client.take_seen().is_empty(), "not yet");
    assert!(pair.server.take_seen().is_empty(), "not yet");

    pair.advance(MS);
    assert_eq!(pair.client.take_seen(), vec![Seen::Deadline(call, Some(5))]);
    assert_eq!(
        pair.server.take_seen(),
        vec![Seen::Deadline(call, Some(call as u32))],
        "the server stops the handler; the client's CANCEL and the server's END cross and \
         are dropped"
    );
    assert_eq!(pair.client.sent.last(), Some(&Kind::Cancel));
    assert_eq!(pair.server.sent.last(), Some(&Kind::End));
    assert_eq!(
        (pair.client.core.open_calls(), pair.server.core.open_calls()),
        (0, 0)
    );
    assert!(!pair.client.core.has_deadlines() && !pair.server.core.has_deadlines());
    assert_eq!(pair.client.core.poll_timeout(), None);
}

#[test]
fn a_server_call_time_limit_caps_every_deadline_and_ends_calls_that_asked_for_none() {
    let mut pair = Pair::new();
    pair.server.core.set_call_time_limit(Some(50 * MS));
    let without = pair.call(5, b"no deadline", None);
    let longer = pair.call(6, b"a longer one", Some(100 * MS));
    let shorter = pair.call(7, b"a shorter one", Some(20 * MS));
    pair.drive();
    let opened = pair.now;
    assert_eq!(pair.server.core.deadline(without), Some(opened + 50 * MS));
    assert_eq!(pair.server.core.deadline(longer), Some(opened + 50 * MS));
    assert_eq!(pair.server.core.deadline(shorter), Some(opened + 20 * MS));
    assert_eq!(
        pair.client.core.deadline(without),
        None,
        "the client asked for none"
    );

    pair.server.take_seen();
    pair.advance(50 * MS);
    let ended: Vec<u64> = pair
        .server
        .take_seen()
        .into_iter()
        .filter_map(|seen| match seen {
            Seen::Deadline(call, _) => Some(call),
            _ => None,
        })
        .collect();
    assert_eq!(ended, vec![shorter, without, longer]);
    assert_eq!(pair.server.core.open_calls(), 0);
}

#[test]
fn a_reply_that_arrives_before_the_deadline_wins_and_the_deadline_is_forgotten() {
    let mut pair = Pair::new();
    let call = pair.call(5, b"ping", Some(100 * MS));
    pair.drive();
    pair.server.take_seen();
    pair.advance(100 * MS - Duration::from_nanos(1));
    pair.reply(call, b"pong");
    pair.drive();
    assert_eq!(
        pair.client.take_seen(),
        vec![Seen::Message(call, b"pong".to_vec(), true, Some(5))]
    );
    pair.advance(MS);
    assert!(pair.client.take_seen().is_empty(), "no second outcome");
    assert!(pair.server.take_seen().is_empty());
    assert_eq!(pair.client.sent, vec![Kind::Message], "no CANCEL");
}

#[test]
fn a_reply_after_the_server_deadline_is_deadline_exceeded_however_late_the_timers_look() {
    let mut pair = Pair::new();
    let call = pair.call(5, b"sleep", Some(5 * MS));
    let quick = pair.call(6, b"ping", None);
    pair.drive();
    pair.server.take_seen();
    // The handler takes 100 ms; neither side's timer runs meanwhile (a loaded machine).
    pair.now += 100 * MS;
    pair.reply(quick, b"pong");
    pair.reply(call, b"late");
    assert_eq!(
        pair.server.take_seen(),
        vec![Seen::Deadline(call, Some(call as u32))]
    );
    pair.drive();
    assert_eq!(
        pair.client.take_seen(),
        vec![
            Seen::Message(quick, b"pong".to_vec(), true, Some(6)),
            Seen::Ended(call, Code::DeadlineExceeded, 5)
        ],
        "the late reply never leaves; a call without a deadline is answered"
    );
    assert_eq!(pair.server.core.open_calls(), 0);
    // A call without a deadline never reads the clock.
    let other = pair.call(7, b"x", None);
    pair.drive();
    assert!(pair
        .server
        .core
        .expire_if_past(other, || panic!("the clock is read only for a deadline"))
        .is_none());
}

#[test]
fn a_reply_in_flight_when_the_deadline_fires_is_discarded_and_credits_come_back() {
    let mut pair = Pair::new();
    let call = pair.call(5, b"ping", Some(100 * MS));
    pair.drive();
    pair.server.take_seen();
    // The reply leaves the server; the client's deadline fires before it arrives.
    pair.reply(call, b"pong");
    pair.now += 100 * MS;
    let expired = pair.client.core.handle_timeout(pair.now);
    assert!(matches!(
        expired[..],
        [crate::Expiry::Deadline {
            call: c,
            user: Some(5)
        }] if c == call
    ));
    pair.drive();
    assert!(
        pair.client.take_seen().is_empty(),
        "the late reply is not a second outcome"
    );
    // The server had answered: the CANCEL names a call it no longer has, and is ignored.
    assert!(pair.server.take_seen().is_empty());
    pair.credits_conserved().unwrap();
    assert_eq!(
        (pair.client.core.open_calls(), pair.server.core.open_calls()),
        (0, 0)
    );
}

#[test]
fn a_cancel_racing_a_reply_gives_exactly_one_outcome_at_each_end() {
    for reply_first in [false, true] {
        let mut pair = Pair::new();
        let call = pair.call(9, b"q", None);
        pair.drive();
        pair.server.take_seen();
        if reply_first {
            pair.reply(call, b"a");
        }
        assert_eq!(pair.client.core.cancel(call, Code::Cancelled), Some(9));
        if !reply_first {
            // The server answers before the CANCEL reaches it.
            pair.reply(call, b"a");
        }
        pair.drive();
        assert!(
            pair.client.take_seen().is_empty(),
            "the caller already has its outcome (cancelled); the reply is dropped"
        );
        assert!(
            pair.server.take_seen().is_empty(),
            "the server finished the call first; the CANCEL is ignored"
        );
        assert_eq!(
            (pair.client.core.open_calls(), pair.server.core.open_calls()),
            (0, 0)
        );
        pair.credits_conserved().unwrap();
    }
}

#[test]
fn a_cancel_that_reaches_the_server_first_stops_the_handler() {
    let mut pair = Pair::new();
    let call = pair.call(9, b"q", None);
    pair.drive();
    pair.server.take_seen();
    pair.client.core.cancel(call, Code::Cancelled);
    pair.drive();
    assert_eq!(
        pair.server.take_seen(),
        vec![Seen::Cancelled(call, Code::Cancelled, call as u32)]
    );
    // The handler's late reply goes nowhere.
    let frame = out(&pair.server.core, Kind::Message, flags::END, 0, b"late");
    assert_eq!(
        pair.server.core.send(call, frame, 0, 0).unwrap_err(),
        SendError::NotOpen
    );
}

#[test]
fn keepalive_pings_a_quiet_peer_and_gives_up_on_a_dead_one() {
    let keepalive = Keepalive {
        interval: Duration::from_secs(1),
        timeout: Duration::from_secs(4),
    };
    let mut pair = Pair::new();
    pair.client.core.set_keepalive(Some(keepalive));
    pair.advance(Duration::ZERO);
    // An idle but live peer answers the PINGs: never given up.
    pair.run_for(Duration::from_secs(30), 250 * MS);
    assert!(
        !pair.client.take_seen().contains(&Seen::PeerSilent),
        "a live peer is kept"
    );
    let pings = pair
        .client
        .sent
        .iter()
        .filter(|k| **k == Kind::Ping)
        .count();
    assert!(
        (10..=30).contains(&pings),
        "about one PING per interval of silence: {pings}"
    );
    let given_up = silence_until_given_up(&mut pair, Duration::from_secs(10));
    assert!(
        given_up >= keepalive.interval + keepalive.timeout
            && given_up <= keepalive.interval + keepalive.timeout + Duration::from_millis(500),
        "detected after {given_up:?}"
    );
}

/// An endpoint of 20,000 connections paced to 1,000 keepalive PINGs a second: each idle
/// connection PINGs once per 20 s of silence, not once a second, and a dead peer is detected
/// after the paced interval plus the timeout, stretched to 20 s too. The pace may change on a
/// live connection.
#[test]
fn paced_keepalive_pings_less_and_still_detects_a_dead_peer() {
    let base = Keepalive::default();
    assert_eq!(base.paced(500, 1000), base, "few connections: unchanged");
    let paced = base.paced(20_000, 1000);
    assert_eq!(paced.interval, Duration::from_secs(20));
    assert_eq!(
        paced.timeout,
        Duration::from_secs(20),
        "as long as the interval"
    );
    let mut pair = Pair::new();
    pair.client.core.set_keepalive(Some(base));
    pair.advance(Duration::ZERO);
    pair.run_for(Duration::from_secs(10), 250 * MS);
    // The endpoint grew: the connection is paced from now on.
    pair.client.core.set_keepalive(Some(paced));
    assert_eq!(pair.client.core.keepalive(), Some(paced));
    let pings_before = pair
        .client
        .sent
        .iter()
        .filter(|k| **k == Kind::Ping)
        .count();
    pair.run_for(Duration::from_secs(100), 250 * MS);
    let pings = pair
        .client
        .sent
        .iter()
        .filter(|k| **k == Kind::Ping)
        .count()
        - pings_before;
    assert!(
        (4..=6).contains(&pings),
        "one PING per 20 s of silence over 100 s: {pings}"
    );
    assert!(!pair.client.take_seen().contains(&Seen::PeerSilent));
    let given_up = silence_until_given_up(&mut pair, Duration::from_secs(60));
    assert!(
        given_up <= paced.interval + paced.timeout + Duration::from_millis(500),
        "detected after {given_up:?}"
    );
}

/// A server paced for 20,000 connections announces its pace once it accepted the client's
/// offer of bit 2 (PROTOCOL.md §22.5): the client then waits 20 s of silence before it PINGs,
/// not 1 s, so 20,000 such clients PING their server 1,000 times a second, not 20,000; and it
/// still gives a dead server up within the pace and its timeout. When the server's pace
/// shrinks again, so does the client's. A client that did not offer the extension keeps its
/// own keepalive.
#[test]
fn a_client_pings_at_its_servers_pace() {
    let base = Keepalive::default();
    let paced = base.paced(20_000, 1000);
    let client_pings = |pair: &Pair| {
        pair.client
            .sent
            .iter()
            .filter(|k| **k == Kind::Ping)
            .count()
    };
    let mut pair = Pair::new();
    pair.server.core.set_keepalive(Some(paced));
    pair.client.core.set_keepalive(Some(base));
    pair.client.core.offer_extensions();
    pair.advance(Duration::ZERO);
    assert_eq!(
        pair.client.core.keepalive(),
        Some(paced),
        "the pace arrived"
    );
    let before = client_pings(&pair);
    pair.run_for(Duration::from_secs(100), 250 * MS);
    // Its own PINGs after 20 s of silence and its answers to the server's: about 5 each.
    let pings = client_pings(&pair) - before;
    assert!(
        (2..=12).contains(&pings),
        "PINGs and answers over 100 s at a 20 s pace: {pings}"
    );
    assert!(!pair.client.take_seen().contains(&Seen::PeerSilent));
    // The server's endpoint shrank: its next tick announces the base again.
    pair.server.core.set_keepalive(Some(base));
    pair.advance(250 * MS);
    assert_eq!(pair.client.core.keepalive(), Some(base), "back to 1 s");
    pair.server.core.set_keepalive(Some(paced));
    pair.advance(250 * MS);
    let given_up = silence_until_given_up(&mut pair, Duration::from_secs(60));
    assert!(
        given_up <= paced.interval + paced.timeout + Duration::from_millis(500),
        "detected after {given_up:?}"
    );

    let mut plain = Pair::new();
    plain.server.core.set_keepalive(Some(paced));
    plain.client.core.set_keepalive(Some(base));
    plain.advance(Duration::ZERO);
    plain.run_for(Duration::from_secs(10), 250 * MS);
    assert_eq!(
        plain.client.core.keepalive(),
        Some(base),
        "no offer, no pace"
    );
}

#[test]
fn poll_timeout_names_the_next_thing_to_do() {
    let mut pair = Pair::new();
    assert_eq!(pair.client.core.poll_timeout(), None, "nothing timed");
    pair.client.core.set_keepalive(Some(Keepalive::default()));
    assert_eq!(
        pair.client.core.poll_timeout(),
        None,
        "keepalive counts from the first tick"
    );
    pair.advance(Duration::ZERO);
    let start = pair.now;
    assert_eq!(
        pair.client.core.poll_timeout(),
        Some(start + Duration::from_secs(1))
    );
    pair.call(1, b"x", Some(200 * MS));
    assert_eq!(pair.client.core.poll_timeout(), Some(start + 200 * MS));
}

#[test]
fn goodbye_gives_back_the_calls_the_server_never_saw() {
    let mut pair = Pair::new();
    let first = pair.call(1, b"a", None);
    pair.drive();
    pair.server.take_seen();
    // A second call is in flight when the server says GOODBYE.
    let second = pair.call(2, b"b", None);
    pair.server.core.goodbye();
    pair.drive();
    assert_eq!(
        pair.client.take_seen(),
        vec![Seen::Goodbye(first, vec![second])]
    );
    assert!(
        pair.server.take_seen().is_empty(),
        "the server refuses the late call without processing it"
    );
    assert_eq!(
        pair.client.core.open_call(3).unwrap_err(),
        SendError::GoingAway,
        "no new calls"
    );
    // The first call is still served.
    pair.reply(first, b"done");
    pair.drive();
    assert_eq!(
        pair.client.take_seen(),
        vec![Seen::Message(first, b"done".to_vec(), true, Some(1))]
    );
}

#[test]
fn a_stream_stalls_on_its_window_and_resumes_when_the_reader_consumes() {
    let mut pair = Pair::new();
    let window = hello().call_window as usize;
    let call = pair.client.core.open_call(1).unwrap();
    let chunk = vec![7u8; 100];
    // Far more than one window, without the server's application consuming anything.
    for _ in 0..(3 * window / chunk.len()) {
        let frame = out(&pair.client.core, Kind::Message, 0, 0, &chunk);
        pair.send(Role::Client, call, frame, 7, 0);
        pair.drive();
        if pair.client.core.queued(call) > 0 {
            break;
        }
    }
    assert!(
        pair.client.core.queued(call) > 0,
        "the window stalls the sender"
    );
    let received: usize = pair
        .server
        .take_seen()
        .iter()
        .map(|s| match s {
            Seen::Message(_, body, ..) => body.len(),
            _ => 0,
        })
        .sum();
    assert!(
        received <= window,
        "never more than a window unread: {received}"
    );
    // The reader consumes what it has: a WINDOW goes back and the queued message leaves.
    pair.server
        .core
        .consumed(call, (received + 16 * (received / chunk.len())) as u32);
    pair.drive();
    assert_eq!(pair.client.core.queued(call), 0, "resumed");
    assert!(matches!(
        pair.server.take_seen()[..],
        [Seen::Message(c, ..)] if c == call
    ));
}

#[test]
fn at_max_calls_the_client_waits_for_a_call_to_end() {
    let mut pair = Pair::new();
    let max = hello().max_calls;
    let calls: Vec<u64> = (0..max).map(|i| pair.call(i, b"x", None)).collect();
    assert_eq!(
        pair.client.core.open_call(99).unwrap_err(),
        SendError::AtCapacity
    );
    pair.drive();
    pair.reply(calls[0], b"y");
    pair.drive();
    assert_eq!(pair.client.core.open_calls(), max - 1);
    let next = pair.client.core.open_call(99).expect("room again");
    assert!(next > calls[calls.len() - 1], "ids keep increasing");
}

#[test]
fn a_server_deadline_runs_from_the_receipt_of_the_opening_frame() {
    let mut pair = Pair::new();
    // The request spends 30 ms on the wire: the server's deadline starts when it arrives.
    let call = pair.call(1, b"x", Some(100 * MS));
    let sent = pair.now;
    pair.now += 30 * MS;
    pair.drive();
    assert_eq!(pair.server.core.deadline(call), Some(sent + 130 * MS));
    // The client gives up first; its CANCEL ends the call at the server before its own
    // deadline.
    pair.advance(70 * MS);
    assert_eq!(pair.client.take_seen(), vec![Seen::Deadline(call, Some(1))]);
    assert!(matches!(
        pair.server.take_seen()[..],
        [Seen::Message(..), Seen::Cancelled(c, Code::DeadlineExceeded, _)] if c == call
    ));
    pair.advance(100 * MS);
    assert!(pair.server.take_seen().is_empty(), "no second end");
}

#[test]
fn a_receiver_holding_its_slots_stalls_the_sender_on_credits_until_it_releases() {
    let mut pair = Pair::new();
    pair.server.release_at_once = false;
    let slots = hello().slot_count;
    let calls: Vec<u64> = (0..hello().max_calls)
        .map(|i| pair.call(i, &[1; 8], None))
        .collect();
    pair.drive();
    for call in &calls {
        pair.reply(*call, b"r");
    }
    pair.drive();
    // Replies free the server's records but not the slots its application holds.
    assert!(pair.server.held >= calls.len() as u32);
    assert!(
        pair.client.core.send_credits() < slots,
        "held slots are not credited"
    );
    pair.server.take_seen();
    // More requests than credits: the client sends while credits last, then queues.
    let more: Vec<u64> = (0..hello().max_calls)
        .map(|i| pair.call(10 + i, &[2; 8], None))
        .collect();
    pair.drive();
    let arrived = pair.server.seen.len();
    assert!(
        arrived < more.len(),
        "stalled on credits: {arrived} arrived"
    );
    assert!(pair.client.core.wants_transmit() || pair.client.core.send_credits() < 2);
    for _ in 0..3 {
        pair.release(Role::Server);
        pair.drive();
    }
    let opened = pair
        .server
        .take_seen()
        .iter()
        .filter(|s| matches!(s, Seen::Message(c, ..) if more.contains(c)))
        .count();
    assert_eq!(
        opened,
        more.len(),
        "every request arrives once slots are released"
    );
}

#[test]
fn calls_beyond_max_calls_wait_in_order_and_start_as_calls_end() {
    let mut pair = Pair::new();
    pair.client.core.queue_beyond_max_calls(true);
    let max = hello().max_calls;
    let calls: Vec<u64> = (0..max + 3).map(|i| pair.call(i, b"x", None)).collect();
    pair.drive();
    assert_eq!(pair.client.core.open_calls(), max);
    assert_eq!(pair.client.core.waiting_calls(), 3);
    let opened: Vec<u64> = pair
        .server
        .take_seen()
        .into_iter()
        .filter_map(|s| match s {
            Seen::Message(c, ..) => Some(c),
            _ => None,
        })
        .collect();
    assert_eq!(
        opened,
        calls[..max as usize],
        "only max_calls reach the server"
    );
    // One answer lets the oldest waiting call go; ids reach the server in order.
    pair.reply(calls[0], b"y");
    pair.drive();
    assert!(matches!(
        pair.server.take_seen()[..],
        [Seen::Message(c, ..)] if c == calls[max as usize]
    ));
    assert_eq!(pair.client.core.waiting_calls(), 2);
}

#[test]
fn a_waiting_call_cancelled_or_past_its_deadline_ends_without_a_frame() {
    let mut pair = Pair::new();
    pair.client.core.queue_beyond_max_calls(true);
    let max = hello().max_calls;
    let running: Vec<u64> = (0..max).map(|i| pair.call(i, b"x", None)).collect();
    let late = pair.call(50, b"late", Some(10 * MS));
    let cancelled = pair.call(51, b"gone", None);
    let kept = pair.call(52, b"kept", None);
    pair.drive();
    pair.server.take_seen();
    let sent_before = pair.client.sent.len();
    assert_eq!(
        pair.client.core.cancel(cancelled, Code::Cancelled),
        Some(51)
    );
    pair.advance(10 * MS);
    assert_eq!(
        pair.client.take_seen(),
        vec![Seen::Deadline(late, Some(50))]
    );
    assert_eq!(
        pair.client.sent.len(),
        sent_before,
        "no CANCEL for calls the server never heard of"
    );
    assert_eq!(pair.client.core.waiting_calls(), 1);
    // The next free place goes to the call still waiting.
    pair.reply(running[0], b"y");
    pair.drive();
    assert!(matches!(
        pair.server.take_seen()[..],
        [Seen::Message(c, ..)] if c == kept
    ));
    pair.credits_conserved().unwrap();
}

#[test]
fn goodbye_gives_back_the_waiting_calls_too() {
    let mut pair = Pair::new();
    pair.client.core.queue_beyond_max_calls(true);
    let max = hello().max_calls;
    let running: Vec<u64> = (0..max).map(|i| pair.call(i, b"x", None)).collect();
    let waiting = pair.call(77, b"w", None);
    pair.drive();
    pair.server.core.goodbye();
    pair.drive();
    assert_eq!(
        pair.client.take_seen(),
        vec![Seen::Goodbye(running[max as usize - 1], vec![waiting])]
    );
    assert_eq!(pair.client.core.waiting_calls(), 0);
}

/// A server core that takes one request message for every method but 9.
fn one_request_pair() -> Pair {
    let mut pair = Pair::new();
    pair.server.core.set_one_request(|method| method != 9);
    pair
}

#[test]
fn a_one_request_call_split_from_its_end_reaches_the_server_whole_at_the_half_close() {
    let mut pair = one_request_pair();
    let call = pair.client.core.open_call(1).unwrap();
    let request = out(&pair.client.core, Kind::Message, 0, 0, b"question");
    pair.send(Role::Client, call, request, 7, 250_000);
    pair.drive();
    assert!(
        pair.server.take_seen().is_empty(),
        "held until the half-close"
    );
    assert_eq!(
        pair.server.core.deadline(call),
        Some(pair.now + 250 * MS),
        "the deadline runs from the opening frame"
    );
    pair.now += 100 * MS;
    let end = out(&pair.client.core, Kind::End, 0, 0, b"");
    pair.send(Role::Client, call, end, 0, 0);
    pair.drive();
    assert_eq!(
        pair.server.take_seen(),
        vec![Seen::Message(call, b"question".to_vec(), true, None)]
    );
    assert_eq!(pair.server.core.deadline(call), Some(pair.now + 150 * MS));
    pair.reply(call, b"answer");
    pair.drive();
    assert_eq!(
        pair.client.take_seen(),
        vec![Seen::Message(call, b"answer".to_vec(), true, Some(1))]
    );
}

#[test]
fn a_one_request_call_with_two_messages_or_none_ends_internal() {
    let mut pair = one_request_pair();
    let two = pair.client.core.open_call(1).unwrap();
    for body in [&b"one"[..], b"two"] {
        let m = out(&pair.client.core, Kind::Message, 0, 0, body);
        pair.send(Role::Client, two, m, 7, 0);
    }
    let none = pair.client.core.open_call(2).unwrap();
    let mut headers = Vec::new();
    metadata::push_entry(&mut headers, "x-k", b"v");
    let h = out(&pair.client.core, Kind::Headers, 0, 0, &headers);
    pair.send(Role::Client, none, h, 7, 0);
    let end = out(&pair.client.core, Kind::End, 0, 0, b"");
    pair.send(Role::Client, none, end, 0, 0);
    pair.drive();
    assert_eq!(
        pair.server.take_seen(),
        vec![
            Seen::Opened(none),
            Seen::Refused(none, Code::Internal, none as u32)
        ],
        "a call whose data was set is given back"
    );
    assert_eq!(
        pair.client.take_seen(),
        vec![
            Seen::Ended(two, Code::Internal, 1),
            Seen::Ended(none, Code::Internal, 2)
        ]
    );
    assert_eq!(pair.server.core.open_calls(), 0);
}

#[test]
fn a_streaming_method_gets_its_messages_as_they_come() {
    let mut pair = one_request_pair();
    let call = pair.client.core.open_call(1).unwrap();
    for body in [&b"a"[..], b"b"] {
        let m = out(&pair.client.core, Kind::Message, 0, 0, body);
        pair.send(Role::Client, call, m, 9, 0);
    }
    pair.drive();
    assert_eq!(
        pair.server.take_seen(),
        vec![
            Seen::Message(call, b"a".to_vec(), false, None),
            Seen::Message(call, b"b".to_vec(), false, None)
        ]
    );
}

#[test]
fn a_unary_reply_with_headers_and_trailers_reaches_the_client_whole_at_its_end() {
    let mut pair = Pair::new();
    let call = pair.unary_call(4, b"q");
    pair.drive();
    pair.server.take_seen();
    let mut headers = Vec::new();
    metadata::push_entry(&mut headers, "x-h", b"1");
    let h = out(&pair.server.core, Kind::Headers, 0, 0, &headers);
    pair.send(Role::Server, call, h, 0, 0);
    let m = out(&pair.server.core, Kind::Message, 0, 0, b"answer");
    pair.send(Role::Server, call, m, 0, 0);
    pair.drive();
    assert!(pair.client.take_seen().is_empty(), "held until the END");
    pair.server
        .core
        .end_call(
            call,
            &crate::WireStatus::new(Code::Ok, ""),
            &[("x-t", b"2")],
        )
        .unwrap();
    pair.drive();
    assert_eq!(
        pair.client.take_seen(),
        vec![Seen::Ended(call, Code::Ok, 4)]
    );
    assert_eq!(pair.client.core.open_calls(), 0);
    pair.credits_conserved().unwrap();
}

#[test]
fn a_unary_call_with_two_responses_is_cancelled_internal() {
    let mut pair = Pair::new();
    let call = pair.unary_call(4, b"q");
    pair.drive();
    for body in [&b"one"[..], b"two"] {
        let m = out(&pair.server.core, Kind::Message, 0, 0, body);
        pair.send(Role::Server, call, m, 0, 0);
    }
    pair.drive();
    assert_eq!(
        pair.client.take_seen(),
        vec![Seen::Refused(call, Code::Internal, 4)]
    );
    assert_eq!(pair.client.sent.last(), Some(&Kind::Cancel));
}
