//! rpc-health, tonic-health's API: the service it makes replaces the server's own health
//! service and answers what its reporter sets, for Check and Watch, over our protocol.

use std::time::Duration;

use rpc_core::server::NamedService;
use rpc_core::standard::health::health_check_response::ServingStatus as Wire;
use rpc_core::standard::health::health_client::HealthClient;
use rpc_core::standard::health::HealthCheckRequest;
use rpc_core::{Code, Server, TransportKind};
use rpc_health::server::health_reporter;
use rpc_health::ServingStatus;
use rpc_tests::scenarios::{with_watchdog, TortureService, RING};
use rpc_tests::testing::torture_server::TortureServer;

type Torture = TortureServer<TortureService>;

fn ask(service: &str) -> HealthCheckRequest {
    HealthCheckRequest {
        service: service.to_string(),
    }
}

#[test]
fn a_health_reporter_sets_what_check_and_watch_answer() {
    with_watchdog("health reporter", Duration::from_secs(60), || {
        assert_eq!(Torture::NAME, "testing.Torture");
        let (mut reporter, health_service) = health_reporter();
        let server = Server::builder()
            .ring(RING)
            .add_service(health_service)
            .add_service(TortureServer::new(TortureService::default()))
            .start("127.0.0.1:0", TransportKind::Tcp)
            .expect("a server starts");
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .expect("a tokio runtime");
        runtime.block_on(async {
            let mut health = HealthClient::connect(format!("http://{}", server.local_addr()))
                .await
                .expect("connects");
            let status = |r: rpc_core::Response<_>| {
                let r: rpc_core::standard::health::HealthCheckResponse = r.into_inner();
                r.status()
            };
            // The server itself starts SERVING; a service nobody reported is unknown (the
            // server's own health service, which would say SERVING, is replaced).
            assert_eq!(
                status(health.check(ask("")).await.expect("the server")),
                Wire::Serving
            );
            let err = health
                .check(ask(Torture::NAME))
                .await
                .expect_err("not reported yet");
            assert_eq!(err.code(), Code::NotFound, "{err}");

            reporter.set_serving::<Torture>().await;
            assert_eq!(
                status(health.check(ask(Torture::NAME)).await.expect("set")),
                Wire::Serving
            );

            // A watch hears the status now, then each change, then that it was forgotten.
            let mut watch = health
                .watch(ask(Torture::NAME))
                .await
                .expect("a watch")
                .into_inner();
            let next = |m: Option<rpc_core::standard::health::HealthCheckResponse>| {
                m.expect("an answer").status()
            };
            assert_eq!(next(watch.message().await.expect("now")), Wire::Serving);
            reporter.set_not_serving::<Torture>().await;
            assert_eq!(
                next(watch.message().await.expect("a change")),
                Wire::NotServing
            );
            assert_eq!(
                status(health.check(ask(Torture::NAME)).await.expect("set")),
                Wire::NotServing
            );
            reporter
                .set_service_status("", ServingStatus::NotServing)
                .await;
            assert_eq!(
                status(health.check(ask("")).await.expect("the server")),
                Wire::NotServing
            );
            reporter.clear_service_status(Torture::NAME).await;
            assert_eq!(
                next(watch.message().await.expect("forgotten")),
                Wire::ServiceUnknown
            );
            let err = health
                .check(ask(Torture::NAME))
                .await
                .expect_err("forgotten");
            assert_eq!(err.code(), Code::NotFound, "{err}");

            // A watch of a service nobody reported says so at once.
            let mut unknown = health
                .watch(ask("no.Such"))
                .await
                .expect("a watch")
                .into_inner();
            assert_eq!(
                next(unknown.message().await.expect("at once")),
                Wire::ServiceUnknown
            );
        });
    });
}
