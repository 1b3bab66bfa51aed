//! Shared credits (`docs/PROTOCOL.md` §22.4) on pairs of cores: the agreement, raises while a
//! client runs short, the base an idle connection falls back to, a client's refusal of a raise
//! it did not agree to, and many connections sharing one pool in random interleavings.

use std::time::Duration;

use super::sim::{Rng, Sim};
use super::{Core, Pair, Seen};
use crate::conn::tests::hello;
use crate::{extension, CreditPool, Error, Header, Hello, Kind, Role, Violation};

/// The tests' HELLO with the smallest grant that cannot stall, and room for many calls.
fn small() -> Hello {
    Hello {
        slot_count: 3,
        max_calls: 16,
        ..hello()
    }
}

/// A pair whose server draws its slots from `pool`, after the client's offer was answered.
fn pooled_pair(pool: &CreditPool) -> Pair {
    let mut pair = Pair::with(small(), small());
    pair.server.core.set_grant(pool.admit(3).expect("fits"));
    pair.client.core.offer_extensions();
    pair.drive();
    pair
}

#[test]
fn a_server_accepts_shared_credits_only_when_its_slots_are_pooled() {
    let pool = CreditPool::new(64);
    let pooled = pooled_pair(&pool);
    assert!(pooled.client.core.shared_credits() && pooled.server.core.shared_credits());
    let both = extension::SUPPORTED;
    assert!(pooled
        .client
        .seen
        .contains(&Seen::Pong(extension::acceptance(both))));

    let mut own_rings = Pair::with(small(), small());
    own_rings.client.core.offer_extensions();
    own_rings.drive();
    assert!(!own_rings.client.core.shared_credits() && !own_rings.server.core.shared_credits());
    let accepted = extension::acceptance(extension::SUPPORTED & !extension::SHARED_CREDITS);
    assert!(own_rings.client.seen.contains(&Seen::Pong(accepted)));
}

#[test]
fn pipelined_calls_raise_the_grant_and_an_idle_connection_gives_it_back() {
    let pool = CreditPool::new(64);
    let mut pair = pooled_pair(&pool);
    let calls: Vec<u64> = (0..8).map(|i| pair.call(i, b"request", None)).collect();
    // Three credits: two requests go, the third credit is the reserve.
    pair.transmit(Role::Client, true);
    assert_eq!(pair.server.inbound.len(), 2);
    pair.deliver_one(Role::Server);
    assert_eq!(
        pair.server.core.grant(),
        3,
        "one frame in flight is no shortage"
    );
    pair.deliver_one(Role::Server);
    // The pool's raises take at most half of it: 32 of 64.
    assert_eq!(
        pair.server.core.grant(),
        3 + 32,
        "down to its reserve, the client's grant is raised as far as the pool allows"
    );
    assert_eq!(pool.raised(), 32);
    pair.credits_conserved().expect("a raise keeps the books");
    pair.drive();
    assert!(
        pair.client.core.send_credits() > 3,
        "the raise reached the client"
    );
    pair.credits_conserved().expect("conserved");

    for (i, &call) in calls.iter().enumerate() {
        pair.drive();
        assert!(pair
            .server
            .seen
            .iter()
            .any(|s| *s == Seen::Message(call, b"request".to_vec(), true, None)));
        pair.reply(call, &[i as u8]);
    }
    pair.drive();
    assert_eq!(pair.client.core.open_calls(), 0);
    assert!(
        pair.server.core.grant() > 3,
        "kept until a tick without calls"
    );
    pair.advance(Duration::ZERO);
    // Idle: every slot released since that tick stays with the pool. What the
    // client already held comes back as it sends: its keepalive PINGs, for one.
    let held = pair.client.core.send_credits();
    for _ in 0..held {
        pair.client.core.ping(7);
        pair.drive();
        pair.credits_conserved()
            .expect("conserved while the grant falls");
    }
    assert_eq!(
        pair.server.core.grant(),
        3,
        "an idle connection keeps its base"
    );
    assert_eq!(pool.raised(), 0);
    assert_eq!(pool.granted(), 3);
}

#[test]
fn a_client_refuses_a_raise_it_did_not_agree_to() {
    // A server that returns credits beyond its slot_count without the agreement breaks §7.4.
    let mut pair = Pair::with(small(), small());
    let raise = |credits: u16| {
        let mut frame = vec![0; crate::HEADER_LEN];
        Header {
            credits,
            ..Header::new(Kind::Credit)
        }
        .encode(&mut frame);
        frame
    };
    let err = pair
        .client
        .core
        .on_frame(&raise(2))
        .expect_err("beyond 3 slots");
    assert!(
        matches!(
            err,
            Error::Protocol {
                violation: Violation::CreditExcess,
                ..
            }
        ),
        "{err}"
    );

    // Agreed, the same raise is taken.
    let pool = CreditPool::new(64);
    let mut pair = pooled_pair(&pool);
    let before = pair.client.core.send_credits();
    pair.client
        .core
        .on_frame(&raise(2))
        .expect("a raise under the agreement");
    assert_eq!(pair.client.core.send_credits(), before + 2);
}

#[test]
fn a_plain_client_runs_at_the_base_grant() {
    // No offer: the server never raises, whatever the client's load.
    let pool = CreditPool::new(64);
    let mut pair = Pair::with(small(), small());
    pair.server.core.set_grant(pool.admit(3).expect("fits"));
    let calls: Vec<u64> = (0..8).map(|i| pair.call(i, b"r", None)).collect();
    for &call in &calls {
        pair.drive();
        pair.reply(call, b"a");
    }
    pair.drive();
    assert_eq!(pair.client.core.open_calls(), 0);
    assert_eq!(pool.raised(), 0, "no raise without the agreement");
    assert!(pair.client.core.send_credits() <= 3);
}

/// Connections whose servers share one pool, stepped in a random order.
const CONNECTIONS: usize = 6;

#[test]
fn connections_sharing_one_pool_never_violate_lose_or_hang() {
    let seeds: u64 = std::env::var("RPC_SIM_SEEDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .map_or(150, |n: u64| n.div_ceil(4));
    let mut raised_somewhere = false;
    for seed in 1..=seeds {
        // Room for every base (at most 8 each) and a little more: raises compete.
        let pool = CreditPool::with_max_grant(CONNECTIONS as u32 * 8 + 16, 24);
        let mut sims: Vec<Sim> = (0..CONNECTIONS as u64)
            .map(|i| Sim::new(seed * 1000 + i, Some(&pool)))
            .collect();
        let mut rng = Rng(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1);
        while let Some(sim) = {
            let live: Vec<usize> = (0..sims.len()).filter(|&i| !sims[i].done()).collect();
            (!live.is_empty()).then(|| live[rng.below(live.len() as u64) as usize])
        } {
            sims[sim].one_step();
            let grants: u32 = sims.iter().map(|s| s.server_core().grant()).sum();
            let seed = sims[sim].seed();
            assert_eq!(
                grants,
                pool.granted(),
                "seed {seed}: grants and pool disagree"
            );
            assert!(
                pool.raised() <= pool.slots() / 2,
                "seed {seed}: raises past half the pool"
            );
            for s in &sims {
                let core: &Core = s.server_core();
                assert!(
                    core.grant() >= core.local().slot_count && core.grant() <= pool.max_grant(),
                    "seed {}: grant {} outside [{}, {}]",
                    s.seed(),
                    core.grant(),
                    core.local().slot_count,
                    pool.max_grant()
                );
            }
            raised_somewhere |= pool.raised() > 0;
        }
        for sim in &mut sims {
            sim.finish();
        }
        drop(sims);
        assert_eq!(
            pool.granted(),
            0,
            "seed {seed}: closed connections keep slots"
        );
    }
    assert!(
        raised_somewhere,
        "no run ever raised a grant: the test tests nothing"
    );
}
