//! A server whose handlers the build script chose per method (`tests/build.rs`:
//! `sync_handlers_for("calc.Calculator.Add")` and `...RunningTotal`): blocking functions and
//! `async fn`s in one trait, each kind served as such, over TCP.

use rpc_core::{Request, Response, Server, Status, Streaming, TransportKind};
use rpc_tests::calc;
use rpc_tests::calc::calculator_client::blocking::CalculatorClient;
use rpc_tests::calc_mixed::calculator_server::{Calculator, CalculatorServer};
use rpc_tests::calc_mixed::{
    AddReply, AddRequest, DivideReply, DivideRequest, EvaluateReply, EvaluateRequest,
    MultiplyReply, MultiplyRequest, SubtractReply, SubtractRequest, SumReply, SumRequest,
};

struct Mixed;

impl Calculator for Mixed {
    // Blocking: a plain function.
    fn add(&self, request: Request<AddRequest>) -> Result<Response<AddReply>, Status> {
        let AddRequest { a, b } = request.into_inner();
        Ok(Response::new(AddReply { value: a + b }))
    }

    async fn subtract(
        &self,
        request: Request<SubtractRequest>,
    ) -> Result<Response<SubtractReply>, Status> {
        let SubtractRequest { a, b } = request.into_inner();
        Ok(Response::new(SubtractReply { value: a - b }))
    }

    async fn multiply(
        &self,
        request: Request<MultiplyRequest>,
    ) -> Result<Response<MultiplyReply>, Status> {
        let MultiplyRequest { a, b } = request.into_inner();
        Ok(Response::new(MultiplyReply { value: a * b }))
    }

    async fn divide(&self, _: Request<DivideRequest>) -> Result<Response<DivideReply>, Status> {
        Err(Status::unimplemented("not in this test"))
    }

    async fn evaluate(
        &self,
        _: Request<EvaluateRequest>,
    ) -> Result<Response<EvaluateReply>, Status> {
        Err(Status::unimplemented("not in this test"))
    }

    // Async: the requests read with `message().await`.
    async fn sum(
        &self,
        request: Request<Streaming<SumRequest>>,
    ) -> Result<Response<SumReply>, Status> {
        let mut requests = request.into_inner();
        let mut reply = SumReply::default();
        while let Some(SumRequest { value }) = requests.message().await? {
            reply.total += value;
            reply.count += 1;
        }
        Ok(Response::new(reply))
    }

    // Blocking: the requests read as a blocking iterator, the responses an iterator.
    type RunningTotalStream = Vec<Result<SumReply, Status>>;
    fn running_total(
        &self,
        request: Request<Streaming<SumRequest>>,
    ) -> Result<Response<Self::RunningTotalStream>, Status> {
        let mut reply = SumReply::default();
        let mut replies = Vec::new();
        for request in request.into_inner().into_blocking_iter() {
            reply.total += request?.value;
            reply.count += 1;
            replies.push(Ok(reply));
        }
        Ok(Response::new(replies))
    }
}

#[test]
fn blocking_and_async_handlers_serve_side_by_side() {
    let server = Server::builder()
        .add_service(CalculatorServer::new(Mixed))
        .start("127.0.0.1:0", TransportKind::Tcp)
        .expect("serves");
    let client = CalculatorClient::connect(server.local_addr()).expect("connects");

    let added = client.add(calc::AddRequest { a: 2, b: 3 }).expect("Add");
    assert_eq!(added.get_ref().value, 5);

    let numbers = (1..=4)
        .map(|value| calc::SumRequest { value })
        .collect::<Vec<_>>();
    let sum = client.sum(numbers.clone()).expect("Sum").into_inner();
    assert_eq!((sum.total, sum.count), (10, 4));

    let mut call = client.running_total(()).expect("RunningTotal");
    for request in &numbers {
        call.send(request).expect("send");
    }
    call.close_send();
    let mut totals = Vec::new();
    while let Some(reply) = call.recv().expect("recv") {
        totals.push(reply.total);
    }
    assert_eq!(totals, [1, 3, 6, 10]);
    server.shutdown();
}
