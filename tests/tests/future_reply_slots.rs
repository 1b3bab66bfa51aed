//! A future polled once and then left (its task not run again yet) may keep its reply in the
//! receive slot it landed in, but only within a quarter of the connection's ring: past that, replies
//! are copied out. So futures an application polls and leaves cannot starve the ring: a
//! blocking call on the same connection still gets its reply, and the left futures complete
//! when awaited. The server's keepalive is on and the client's off: a connection stalled by
//! held slots (the server out of credits, the client's re-posts short of the credit threshold)
//! answers no PING in time and is closed, which fails the blocking call; the client's own
//! PINGs would carry credits and hide the stall. A watchdog fails the test instead of hanging.

use std::time::Duration;

use futures::FutureExt;
use rpc_core::{Client, RingConfig, Server, TransportKind};
use rpc_tests::scenarios::{payload, with_watchdog, TortureService, RING};
use rpc_tests::testing::torture_client::{blocking, TortureClient};
use rpc_tests::testing::torture_server::TortureServer;

#[test]
fn replies_left_by_polled_futures_do_not_starve_the_ring() {
    with_watchdog("reply-slots", Duration::from_secs(30), || {
        let server = Server::builder()
            .ring(RING)
            .add_service(TortureServer::new(TortureService::default()))
            .start("127.0.0.1:0", TransportKind::Tcp)
            .expect("serves");
        // Eight receive slots: at most two replies left in them by futures.
        let client = Client::builder()
            .transport(TransportKind::Tcp)
            .ring(RingConfig {
                slot_count: 8,
                ..RING
            })
            // No busy polling: the first poll of a future leaves it pending.
            .spin(Duration::ZERO)
            .keepalive(None)
            .connect(server.local_addr())
            .expect("connects");
        let mut futures_client = TortureClient::new(client.clone());
        let blocking_client = blocking::TortureClient::new(client);

        let mut left: Vec<_> = (0..24)
            .map(|i| futures_client.echo(payload(i, 64)))
            .collect();
        // Each polled once, then left until awaited below (unless ready at once).
        let early: Vec<_> = left.iter_mut().map(|f| f.now_or_never()).collect();
        // Replies for three times the ring's slots are on their way or have landed.
        let echoed = blocking_client
            .echo(payload(100, 64))
            .expect("the blocking call gets its reply")
            .into_inner();
        assert_eq!(echoed, payload(100, 64));
        for (i, (future, early)) in left.into_iter().zip(early).enumerate() {
            let reply = match early {
                Some(reply) => reply,
                None => futures::executor::block_on(future),
            };
            let reply = reply.expect("a left future completes");
            assert_eq!(reply.into_inner(), payload(i as u64, 64));
        }
        server.shutdown();
    });
}
