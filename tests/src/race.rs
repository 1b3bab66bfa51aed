//! The `testing.Race` service as the race and async tests serve it: handlers that await
//! futures-timer timers, each handler's future (or response stream) counted from its start to
//! its drop, so a test can check that every one of them either finished or was dropped and
//! none was left behind by a cancel, a deadline or a lost connection.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::stream::BoxStream;
use futures_timer::Delay;
use rpc_core::{Client, Code, Request, Response, Server, Status, Streaming, TransportKind};

use crate::scenarios::payload;
use crate::testing::race_server::Race;
use crate::testing::{FloodRequest, Nothing, Payload, SleepRequest};

/// Counts of a server's handler futures (for Flood: the response stream, which outlives the
/// handler's future and carries its count on).
#[derive(Debug, Default)]
pub struct Census {
    started: AtomicU64,
    finished: AtomicU64,
    dropped: AtomicU64,
    peak: AtomicU64,
    produced: AtomicU64,
}

impl Census {
    /// A census shared by a service and the test that watches it.
    pub fn new() -> Arc<Census> {
        Arc::new(Census::default())
    }

    /// Handlers started.
    pub fn started(&self) -> u64 {
        self.started.load(Ordering::SeqCst)
    }

    /// Handlers that ran to their end (a Flood stream: to its last message).
    pub fn finished(&self) -> u64 {
        self.finished.load(Ordering::SeqCst)
    }

    /// Handlers dropped before their end (the call was cancelled, expired or lost).
    pub fn dropped(&self) -> u64 {
        self.dropped.load(Ordering::SeqCst)
    }

    /// Handlers started and neither finished nor dropped yet.
    pub fn live(&self) -> u64 {
        // Ends first: a handler that starts between the two loads is counted as live, never
        // an end without its start (no underflow).
        let ended = self.finished() + self.dropped();
        self.started().saturating_sub(ended)
    }

    /// The most handlers live at once, as seen when each started.
    pub fn peak(&self) -> u64 {
        self.peak.load(Ordering::SeqCst)
    }

    /// Flood messages handed to the runtime so far (all streams).
    pub fn produced(&self) -> u64 {
        self.produced.load(Ordering::SeqCst)
    }

    /// Waits until no handler is live; fails if some still are after `limit`. Finishing or
    /// dropping a handler takes microseconds once its call ended (or was cancelled, or its
    /// connection lost), so a generous `limit` passing means a handler future was leaked:
    /// neither finished nor dropped, and never will be.
    pub fn wait_until_idle(&self, limit: Duration) {
        let start = Instant::now();
        while self.live() > 0 {
            assert!(
                start.elapsed() < limit,
                "{} handler future(s) neither finished nor dropped {limit:?} after their calls \
                 ended: leaked ({self:?})",
                self.live()
            );
            std::thread::sleep(Duration::from_millis(1));
        }
    }
}

/// One handler's place in a [`Census`]: counted as started when made, as finished or
/// dropped when dropped.
pub struct Alive {
    census: Arc<Census>,
    finished: bool,
}

impl Alive {
    /// Counts a handler as started.
    pub fn new(census: &Arc<Census>) -> Alive {
        let started = census.started.fetch_add(1, Ordering::SeqCst) + 1;
        let ended = census.finished() + census.dropped();
        census
            .peak
            .fetch_max(started.saturating_sub(ended), Ordering::SeqCst);
        Alive {
            census: Arc::clone(census),
            finished: false,
        }
    }

    /// The handler ran to its end.
    pub fn finish(mut self) {
        self.finished = true;
    }
}

impl Drop for Alive {
    fn drop(&mut self) {
        let count = if self.finished {
            &self.census.finished
        } else {
            &self.census.dropped
        };
        count.fetch_add(1, Ordering::SeqCst);
    }
}

/// `testing.Race` on futures-timer timers, counted in `census`.
pub struct RaceService {
    /// Where the handlers are counted.
    pub census: Arc<Census>,
}

impl RaceService {
    /// A service counting its handlers in `census`.
    pub fn new(census: &Arc<Census>) -> RaceService {
        RaceService {
            census: Arc::clone(census),
        }
    }
}

/// The nap a `SleepRequest` asks for.
pub fn nap_of(request: &SleepRequest) -> Duration {
    Duration::from_millis(u64::from(request.millis))
        + Duration::from_micros(u64::from(request.micros))
}

impl Race for RaceService {
    async fn nap(&self, request: Request<SleepRequest>) -> Result<Response<Nothing>, Status> {
        let alive = Alive::new(&self.census);
        // Awaited: the handler holds no thread while the timer runs.
        Delay::new(nap_of(request.get_ref())).await;
        alive.finish();
        Ok(Response::new(Nothing {}))
    }

    type FloodStream = BoxStream<'static, Result<Payload, Status>>;

    async fn flood(
        &self,
        request: Request<FloodRequest>,
    ) -> Result<Response<Self::FloodStream>, Status> {
        let alive = Alive::new(&self.census);
        let census = Arc::clone(&self.census);
        let FloodRequest {
            size,
            count,
            interval_micros,
        } = request.into_inner();
        let interval = Duration::from_micros(u64::from(interval_micros));
        // The stream carries `alive`: it is what stays of the call once the handler's future
        // returned, and the runtime drops it when the call ends or is cancelled.
        let stream = futures::stream::unfold((0u64, alive), move |(id, alive)| {
            let census = Arc::clone(&census);
            async move {
                if count != 0 && id == count {
                    alive.finish();
                    return None;
                }
                if id > 0 && !interval.is_zero() {
                    Delay::new(interval).await;
                }
                // Counted when handed over: the runtime polls for the next message only once
                // the previous one left its send queue, so this count is what the server
                // produced, sent or not.
                census.produced.fetch_add(1, Ordering::SeqCst);
                Some((Ok(payload(id, size as usize)), (id + 1, alive)))
            }
        });
        Ok(Response::new(Box::pin(stream)))
    }
}

/// A Flood request: `count` payloads of `size` bytes (0: without end), `interval_micros` µs
/// apart.
pub fn flood(size: u32, count: u64, interval_micros: u32) -> FloodRequest {
    FloodRequest {
        size,
        count,
        interval_micros,
    }
}

/// Checks the `i`th message of a Flood stream of `size`-byte payloads.
pub fn check_message(message: &Payload, i: u64, size: u32) {
    assert_eq!(message.id, i, "a Flood stream's messages arrive in order");
    assert_eq!(*message, payload(i, size as usize), "message {i} intact");
}

/// Reads a Flood stream of `size`-byte payloads to its end, checking each message (the next
/// one is message `from`); returns how many messages the stream had and how it ended.
pub fn read_to_end(
    stream: &mut Streaming<Payload>,
    from: u64,
    size: u32,
) -> (u64, Result<(), Status>) {
    let mut n = from;
    loop {
        match stream.blocking_message() {
            Ok(Some(message)) => {
                check_message(&message, n, size);
                n += 1;
            }
            Ok(None) => return (n, Ok(())),
            Err(status) => return (n, Err(status)),
        }
    }
}

/// What a restart's steps below may take on a loaded machine (they take milliseconds).
const RESTART_SETTLE: Duration = Duration::from_secs(20);

/// A Race server counted by `census`, serving on `addr` over `transport`.
fn race_server(
    addr: &str,
    transport: TransportKind,
    census: &Arc<Census>,
) -> Result<Server, rpc_core::Error> {
    use crate::testing::race_server::RaceServer;
    Server::builder()
        .add_service(RaceServer::new(RaceService::new(census)))
        .start(addr, transport)
}

/// A Race server on `addr` once the server that had it lets go of it (a restart at the same
/// address: the old server stops listening before it says GOODBYE). Panics if the address
/// is still taken 20 s after `since` (`RESTART_SETTLE`).
pub fn serve_again(
    addr: &str,
    transport: TransportKind,
    census: &Arc<Census>,
    since: Instant,
) -> Server {
    loop {
        match race_server(addr, transport, census) {
            Ok(server) => return server,
            Err(e) => {
                assert!(since.elapsed() < RESTART_SETTLE, "{addr} stays taken: {e}");
                std::thread::sleep(Duration::from_millis(1));
            }
        }
    }
}

/// Makes `call` until one gets through (once the old server's GOODBYE reached the client, a
/// new connection takes it); every failure before must be UNAVAILABLE. Panics if none got
/// through 20 s after `since` (`RESTART_SETTLE`).
pub fn until_a_call_gets_through<T>(since: Instant, mut call: impl FnMut() -> Result<T, Status>) {
    while let Err(status) = call() {
        assert_eq!(status.code(), Code::Unavailable, "{status}");
        assert!(
            since.elapsed() < RESTART_SETTLE,
            "no call got through: {status}"
        );
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// A server restarted at the same address (a rolling restart), the old one serving on `bind`
/// over `server_transport` and the client speaking `client_transport` (gRPC: to the server's
/// gRPC face, whose GOAWAY is the GOODBYE). Once the old server's GOODBYE reaches the client,
/// new calls go to a new connection, to the new server, while the call the old one is
/// processing finishes there OK. Calls that cross the GOODBYE may fail UNAVAILABLE (not
/// processed), and calls made before the GOODBYE reached the client may be served by the old
/// server; none waits for the old connection to close. With `async_calls`, the calls
/// after the GOODBYE are futures, which connect off their thread. Panics on a failure; the
/// caller runs it under a watchdog.
pub fn restart_at_the_same_address(
    bind: &str,
    server_transport: TransportKind,
    client_transport: TransportKind,
    async_calls: bool,
) {
    use crate::testing::race_client::{blocking, RaceClient};
    let old_census = Census::new();
    let old = race_server(bind, server_transport, &old_census).expect("the old server starts");
    let addr = old.local_addr().to_string();
    let client = Client::builder()
        .transport(client_transport)
        .connect(&addr)
        .expect("connects");
    let blocking = blocking::RaceClient::new(client.clone());
    let futures = || RaceClient::new(client.clone());
    // Within the old server's 5 s of grace: it closes its connection once this ends.
    let long = futures().nap(SleepRequest {
        millis: 4_000,
        micros: 0,
    });
    let start = Instant::now();
    while old_census.started() < 1 {
        assert!(
            start.elapsed() < RESTART_SETTLE,
            "the old server never started the call"
        );
        std::thread::sleep(Duration::from_millis(1));
    }
    let stopper = std::thread::spawn(move || old.shutdown());
    let new_census = Census::new();
    let new = serve_again(&addr, server_transport, &new_census, start);
    let short = SleepRequest {
        millis: 0,
        micros: 1,
    };
    // A call made before the old server's GOODBYE reached the client goes to the old server,
    // which serves it: that is allowed, and the client calls again.
    let mut served_by_old = 0;
    until_a_call_gets_through(start, || {
        let result = match async_calls {
            true => futures().nap(short).wait(),
            false => blocking.nap(short),
        };
        if result.is_ok() && new_census.finished() == 0 {
            served_by_old += 1;
            return Err(Status::unavailable("served before the GOODBYE came"));
        }
        result
    });
    assert_eq!(new_census.finished(), 1, "the new server served the call");
    assert_eq!(
        old_census.finished(),
        served_by_old,
        "the new call did not wait for the old connection to close"
    );
    long.wait().expect("the call the old server processes");
    stopper.join().expect("the old server's shutdown");
    assert_eq!(old_census.finished(), served_by_old + 1);
    blocking.nap(short).expect("a call after the restart");
    new.shutdown();
}
