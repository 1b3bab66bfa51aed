//! The code generated from `proto/tricky/*.proto` compiles, has the names and signatures
//! `docs/ARCHITECTURE.md` specifies, and works end to end over TCP.
//!
//! Signatures are pinned by coercing functions to typed `fn` pointers and by implementing the
//! server traits: a missing, extra or differently typed method fails to compile.

use std::time::Duration;

use futures::stream::{self, BoxStream, StreamExt};
use rpc_core::codegen::{method_id, MethodDescriptor, MethodKind, Service, ServiceDescriptor};
use rpc_core::{
    Code, Request, Response, ResponseFuture, Server, Status, Streaming, StreamingCall,
    TransportKind,
};
use rpc_tests::tricky_protos::{self as protos, other, r#type, svc, tricky as t};

/// Unary handlers that answer with a default (or echoed) message.
macro_rules! handlers {
    ($( $name:ident ( $input:ty ) -> $output:ty; )*) => {
        $(
            async fn $name(&self, request: Request<$input>) -> Result<Response<$output>, Status> {
                let _ = request.into_inner();
                Ok(Response::new(<$output>::default()))
            }
        )*
    };
}

struct Kw;

impl t::keywords_server::Keywords for Kw {
    async fn r#match(&self, request: Request<t::Result>) -> Result<Response<t::Result>, Status> {
        let mut reply = request.into_inner();
        reply.r#match = !reply.r#match;
        reply.self_ += 1;
        Ok(Response::new(reply))
    }

    async fn foo_async(&self, _request: Request<t::Ok>) -> Result<Response<t::Err>, Status> {
        Err(Status::new(Code::AlreadyExists, "foo_async ran"))
    }

    async fn other(&self, request: Request<other::Msg>) -> Result<Response<()>, Status> {
        if request.get_ref().text == "fail" {
            return Err(Status::new(Code::InvalidArgument, "asked to fail"));
        }
        Ok(Response::new(()))
    }

    handlers! {
        r#type(t::Option) -> t::Box;
        self_(t::Ok) -> t::Ok;
        self_type(t::Self_) -> t::Self_;
        super_(t::Send) -> t::Sync;
        crate_(t::Vec) -> t::String;
        r#async(t::Arc) -> t::Arc;
        r#await(t::T) -> t::T;
        r#fn(t::Status) -> t::Request;
        extern_(t::Client) -> t::Service;
        r#gen(t::Methods) -> t::Methods;
        foo(t::Ok) -> t::Err;
        get_x(t::Ok) -> t::Ok;
        get_x_2(t::Ok) -> t::Ok;
        get_x_3(t::Ok) -> t::Ok;
        new_2(t::IntoRequest) -> t::Ok;
        connect_2(t::Ok) -> t::Ok;
        inner_2(t::Ok) -> t::Ok;
        clone(t::Ok) -> t::Ok;
        into_foo(t::Ok) -> t::Ok;
        descriptor(t::Ok) -> t::Ok;
        call(t::Ok) -> t::Ok;
        lower_camel(t::Ok) -> t::Ok;
    }
}

struct Everything;

impl t::more_names_server::MoreNames for Everything {
    handlers! {
        use_result(t::Result) -> t::Box;
        nested(t::outer::Middle) -> t::outer::middle::Inner;
        now(()) -> ::prost_types::Timestamp;
        sleep(::prost_types::Duration) -> ();
        wrapped(String) -> bool;
        bytes(Vec<u8>) -> u64;
    }
}

/// The depth of an `Inner`.
fn inner(depth: i32) -> t::outer::middle::Inner {
    t::outer::middle::Inner { depth }
}

impl t::streams_server::Streams for Everything {
    async fn unary(&self, request: Request<t::Outer>) -> Result<Response<t::Outer>, Status> {
        Ok(Response::new(request.into_inner()))
    }

    /// The sum of the depths, as the id.
    async fn upload(
        &self,
        request: Request<Streaming<t::outer::middle::Inner>>,
    ) -> Result<Response<t::Outer>, Status> {
        let mut inners = request.into_inner();
        let mut sum = 0i64;
        while let Some(i) = inners.message().await? {
            sum += i64::from(i.depth);
        }
        Ok(Response::new(t::Outer {
            choice: Some(t::outer::Choice::Id(sum)),
            ..Default::default()
        }))
    }

    type DownloadStream = BoxStream<'static, Result<t::outer::Middle, Status>>;

    /// `id` middles of increasing depth.
    async fn download(
        &self,
        request: Request<t::Outer>,
    ) -> Result<Response<Self::DownloadStream>, Status> {
        let n = match request.into_inner().choice {
            Some(t::outer::Choice::Id(n)) => n as i32,
            _ => 0,
        };
        let middles = (0..n).map(|d| {
            Ok(t::outer::Middle {
                inner: Some(inner(d)),
            })
        });
        Ok(Response::new(stream::iter(middles).boxed()))
    }

    type ChatStream = BoxStream<'static, Result<prost_types::Timestamp, Status>>;

    /// One timestamp per empty message, counting them.
    async fn chat(
        &self,
        request: Request<Streaming<()>>,
    ) -> Result<Response<Self::ChatStream>, Status> {
        let stamps = request.into_inner().enumerate().map(|(i, m)| {
            m.map(|()| prost_types::Timestamp {
                seconds: i as i64,
                nanos: 0,
            })
        });
        Ok(Response::new(stamps.boxed()))
    }

    handlers! {
        last(t::Outer) -> t::Outer;
    }
}

impl t::only_streams_server::OnlyStreams for Everything {
    async fn up(&self, _: Request<Streaming<t::Outer>>) -> Result<Response<t::Outer>, Status> {
        Err(Status::unimplemented("up"))
    }

    type DownStream = stream::Empty<Result<t::Outer, Status>>;

    async fn down(&self, _: Request<t::Outer>) -> Result<Response<Self::DownStream>, Status> {
        Ok(Response::new(stream::empty()))
    }

    type BothStream = Streaming<t::Outer>;

    /// Echoes its requests (its request stream is a response stream too).
    async fn both(
        &self,
        request: Request<Streaming<t::Outer>>,
    ) -> Result<Response<Self::BothStream>, Status> {
        Ok(Response::new(request.into_inner()))
    }
}

impl t::clash2_server::Clash for Everything {
    handlers! { ping(t::ClashClient) -> t::ClashClient; }
}

impl t::foo_bar_server::FooBar for Everything {
    handlers! { ping(t::Ok) -> t::Ok; }
}

impl t::foo_bar2_server::FooBar for Everything {
    handlers! { ping(t::Ok) -> t::Ok; }
}

impl t::nested::deep::deep_server::Deep for Everything {
    handlers! {
        down(t::nested::deep::DeepRequest) -> t::Result;
        across(other::msg::Sub) -> t::outer::middle::Inner;
    }

    type StreamStream = stream::Empty<Result<other::Msg, Status>>;

    async fn stream(
        &self,
        _: Request<Streaming<t::Outer>>,
    ) -> Result<Response<Self::StreamStream>, Status> {
        Ok(Response::new(stream::empty()))
    }
}

impl other::other_server::Other for Everything {
    handlers! {
        echo(other::Msg) -> other::Msg;
        echo_sub(other::msg::Sub) -> other::msg::Sub;
    }
}

impl protos::bare_server::Bare for Everything {
    handlers! {
        ping(protos::BareRequest) -> protos::BareRequest;
        across(other::Msg) -> protos::BareRequest;
    }
}

impl r#type::use_server::Use for Everything {
    handlers! { r#in(r#type::In) -> protos::BareRequest; }
}

impl svc::self_server::Self_ for Everything {
    handlers! { ping(t::Ok) -> t::Ok; }
}
impl svc::type_server::Type for Everything {
    handlers! { ping(t::Ok) -> t::Ok; }
}
impl svc::t_server::T for Everything {
    handlers! { ping(t::T) -> t::T; }
}
impl svc::s_server::S for Everything {
    handlers! { ping(t::T) -> t::T; }
}
impl svc::result_server::Result for Everything {
    handlers! { ping(t::Result) -> t::Result; }
}
impl svc::option_server::Option for Everything {
    handlers! { ping(t::Option) -> t::Option; }
}
impl svc::service_server::Service for Everything {
    handlers! { call(t::Service) -> t::Service; }
}
impl svc::service2_server::Service for Everything {
    handlers! { ping(t::Methods) -> t::Methods; }
}
impl svc::send_server::Send for Everything {
    handlers! { ping(t::Send) -> t::Sync; }
}
impl svc::arc_server::Arc for Everything {
    handlers! { ping(t::Arc) -> t::Arc; }
}
impl svc::empty_server::Empty for Everything {}

fn is_service<S: Service + Clone>(service: S) -> &'static ServiceDescriptor {
    service.descriptor()
}

#[test]
fn every_server_is_a_service() {
    let services = [
        is_service(t::keywords_server::KeywordsServer::new(Kw)),
        is_service(t::more_names_server::MoreNamesServer::new(Everything)),
        is_service(t::streams_server::StreamsServer::new(Everything)),
        is_service(t::only_streams_server::OnlyStreamsServer::new(Everything)),
        is_service(t::clash2_server::ClashServer::new(Everything)),
        is_service(t::foo_bar_server::FooBarServer::new(Everything)),
        is_service(t::foo_bar2_server::FooBarServer::new(Everything)),
        is_service(t::nested::deep::deep_server::DeepServer::new(Everything)),
        is_service(other::other_server::OtherServer::new(Everything)),
        is_service(protos::bare_server::BareServer::new(Everything)),
        is_service(r#type::use_server::UseServer::new(Everything)),
        is_service(svc::self_server::SelfServer::new(Everything)),
        is_service(svc::type_server::TypeServer::new(Everything)),
        is_service(svc::t_server::TServer::new(Everything)),
        is_service(svc::s_server::SServer::new(Everything)),
        is_service(svc::result_server::ResultServer::new(Everything)),
        is_service(svc::option_server::OptionServer::new(Everything)),
        is_service(svc::service_server::ServiceServer::new(Everything)),
        is_service(svc::service2_server::ServiceServer::new(Everything)),
        is_service(svc::send_server::SendServer::new(Everything)),
        is_service(svc::arc_server::ArcServer::new(Everything)),
        is_service(svc::empty_server::EmptyServer::new(Everything)),
    ];
    let names: Vec<&str> = services.iter().map(|s| s.name).collect();
    assert_eq!(
        names,
        [
            "tricky.Keywords",
            "tricky.MoreNames",
            "tricky.Streams",
            "tricky.OnlyStreams",
            "tricky.Clash",
            "tricky.FooBar",
            "tricky.foo_bar",
            "tricky.nested.deep.Deep",
            "other.Other",
            "Bare",
            "type.Use",
            "svc.Self",
            "svc.type",
            "svc.T",
            "svc.S",
            "svc.Result",
            "svc.Option",
            "svc.Service",
            "svc.SERVICE",
            "svc.Send",
            "svc.Arc",
            "svc.Empty",
        ]
    );
    for service in services {
        for method in service.methods {
            assert_eq!(method.service, service.name);
            assert_eq!(method.path, format!("/{}/{}", service.name, method.name));
            assert_eq!(method.id, method_id(method.path));
        }
    }
    assert!(svc::empty_server::SERVICE.methods.is_empty());
    // `from_arc` and `Clone` share one implementation.
    let shared = std::sync::Arc::new(Everything);
    let server = svc::t_server::TServer::from_arc(shared.clone());
    let clone = server.clone();
    assert!(std::sync::Arc::ptr_eq(server.inner(), clone.inner()));
    assert_eq!(std::sync::Arc::strong_count(&shared), 3);
}

#[test]
fn descriptors_keep_proto_names_order_and_kinds() {
    let methods = t::keywords_server::SERVICE.methods;
    let names: Vec<&str> = methods.iter().map(|m| m.name).collect();
    assert_eq!(
        names,
        [
            "Match",
            "Type",
            "Self",
            "SelfType",
            "Super",
            "Crate",
            "Async",
            "Await",
            "Fn",
            "Extern",
            "Gen",
            "Foo",
            "FooAsync",
            "GetX",
            "get_x",
            "Get_X",
            "New",
            "Connect",
            "Inner",
            "Clone",
            "IntoFoo",
            "Descriptor",
            "Call",
            "lowerCamel",
            "Other",
        ]
    );
    assert!(methods.iter().all(|m| m.kind == MethodKind::Unary));
    assert_eq!(methods[12].path, "/tricky.Keywords/FooAsync");

    let streams = t::streams_server::SERVICE;
    let kinds: Vec<(&str, MethodKind)> = streams.methods.iter().map(|m| (m.name, m.kind)).collect();
    assert_eq!(
        kinds,
        [
            ("Unary", MethodKind::Unary),
            ("Upload", MethodKind::ClientStreaming),
            ("Download", MethodKind::ServerStreaming),
            ("Chat", MethodKind::BidiStreaming),
            ("Last", MethodKind::Unary),
        ]
    );
    let expected = MethodDescriptor::new(
        "tricky.Streams",
        "Chat",
        "/tricky.Streams/Chat",
        MethodKind::BidiStreaming,
    );
    assert_eq!(streams.methods[3], expected);
    assert_eq!(streams.methods[3].id, method_id("/tricky.Streams/Chat"));

    let deep = t::nested::deep::deep_server::SERVICE;
    assert_eq!(deep.methods[0].path, "/tricky.nested.deep.Deep/Down");
    assert_eq!(protos::bare_server::SERVICE.methods[0].path, "/Bare/Ping");
    assert_eq!(r#type::use_server::SERVICE.methods[0].path, "/type.Use/In");
}

#[test]
fn client_signatures() {
    use t::keywords_client::blocking::KeywordsClient as K;
    use t::keywords_client::KeywordsClient as A;
    type Res<T> = Result<Response<T>, Status>;
    type Call<Q, A> = Result<StreamingCall<Q, A>, Status>;

    let _: fn(rpc_core::Client) -> K = K::new;
    let _: fn(&str) -> Result<K, rpc_core::Error> = K::connect;
    let _: fn(&K) -> &rpc_core::Client = K::inner;
    let _: fn(rpc_core::Client) -> A = A::new;
    let _: fn(&A) -> &rpc_core::Client = A::inner;
    let _: fn(K) -> A = A::from;
    let _: fn(A) -> K = K::from;
    // Unary: the message or a `Request` around it; blocking, and async under the same name
    // (tonic's shape).
    let _: fn(&K, t::Result) -> Res<t::Result> = K::r#match;
    let _: fn(&K, Request<t::Result>) -> Res<t::Result> = K::r#match;
    let _: fn(&mut A, t::Result) -> ResponseFuture<t::Result, t::Result> = A::r#match;
    let _: fn(&mut A, Request<t::Result>) -> ResponseFuture<t::Result, t::Result> = A::r#match;
    let _: fn(&K, t::Option) -> Res<t::Box> = K::r#type;
    let _: fn(&K, t::Ok) -> Res<t::Ok> = K::self_;
    let _: fn(&mut A, t::Ok) -> ResponseFuture<t::Ok, t::Ok> = A::self_;
    let _: fn(&K, t::Self_) -> Res<t::Self_> = K::self_type;
    let _: fn(&K, t::Send) -> Res<t::Sync> = K::super_;
    let _: fn(&K, t::Vec) -> Res<t::String> = K::crate_;
    let _: fn(&K, t::Arc) -> Res<t::Arc> = K::r#async;
    let _: fn(&mut A, t::Arc) -> ResponseFuture<t::Arc, t::Arc> = A::r#async;
    let _: fn(&K, t::T) -> Res<t::T> = K::r#await;
    let _: fn(&K, t::Status) -> Res<t::Request> = K::r#fn;
    let _: fn(&K, t::Client) -> Res<t::Service> = K::extern_;
    let _: fn(&K, t::Methods) -> Res<t::Methods> = K::r#gen;
    // Names: `FooAsync` beside `Foo` (no async variants to collide with), three `get_x`,
    // the client's own functions.
    let _: fn(&K, t::Ok) -> Res<t::Err> = K::foo;
    let _: fn(&K, t::Ok) -> Res<t::Err> = K::foo_async;
    let _: fn(&mut A, t::Ok) -> ResponseFuture<t::Err, t::Ok> = A::foo_async;
    let _: fn(&K, t::Ok) -> Res<t::Ok> = K::get_x;
    let _: fn(&K, t::Ok) -> Res<t::Ok> = K::get_x_2;
    let _: fn(&K, t::Ok) -> Res<t::Ok> = K::get_x_3;
    let _: fn(&K, t::IntoRequest) -> Res<t::Ok> = K::new_2;
    let _: fn(&K, t::Ok) -> Res<t::Ok> = K::connect_2;
    let _: fn(&mut A, t::Ok) -> ResponseFuture<t::Ok, t::Ok> = A::inner_2;
    let _: fn(&K, t::Ok) -> Res<t::Ok> = K::clone;
    let _: fn(&K, t::Ok) -> Res<t::Ok> = K::into_foo;
    let _: fn(&K, t::Ok) -> Res<t::Ok> = K::descriptor;
    let _: fn(&K, t::Ok) -> Res<t::Ok> = K::call;
    let _: fn(&K, t::Ok) -> Res<t::Ok> = K::lower_camel;
    // Another package's type, and `google.protobuf.Empty` as `()`.
    let _: fn(&K, other::Msg) -> Res<()> = K::other;

    // Well-known types.
    use t::more_names_client::blocking::MoreNamesClient as M;
    let _: fn(&M, t::outer::Middle) -> Res<t::outer::middle::Inner> = M::nested;
    let _: fn(&M, ()) -> Res<prost_types::Timestamp> = M::now;
    let _: fn(
        &mut t::more_names_client::MoreNamesClient,
        (),
    ) -> ResponseFuture<prost_types::Timestamp, ()> = t::more_names_client::MoreNamesClient::now;
    let _: fn(&M, prost_types::Duration) -> Res<()> = M::sleep;
    let _: fn(&M, String) -> Res<bool> = M::wrapped;
    let _: fn(&M, Vec<u8>) -> Res<u64> = M::bytes;

    // Streaming, blocking forms (the async ones return futures, exercised end to end).
    use t::streams_client::blocking::StreamsClient as S;
    let _: fn(&S, t::Outer) -> Res<t::Outer> = S::unary;
    let _: fn(&S, Vec<t::outer::middle::Inner>) -> Res<t::Outer> = S::upload;
    let _: fn(&S, std::iter::Empty<t::outer::middle::Inner>) -> Res<t::Outer> = S::upload;
    let _: fn(&S, Request<Vec<t::outer::middle::Inner>>) -> Res<t::Outer> = S::upload;
    let _: fn(&S, t::Outer) -> Res<Streaming<t::outer::Middle>> = S::download;
    let _: fn(&S, Request<t::Outer>) -> Res<Streaming<t::outer::Middle>> = S::download;
    let _: fn(&S, ()) -> Call<(), prost_types::Timestamp> = S::chat;
    let _: fn(&S, Request<()>) -> Call<(), prost_types::Timestamp> = S::chat;
    let _: fn(
        &mut t::streams_client::StreamsClient,
        t::Outer,
    ) -> ResponseFuture<t::Outer, t::Outer> = t::streams_client::StreamsClient::last;

    // Names of the other clients.
    let _: fn(rpc_core::Client) -> t::clash2_client::blocking::ClashClient =
        t::clash2_client::blocking::ClashClient::new;
    let _: fn(rpc_core::Client) -> t::foo_bar2_client::blocking::FooBarClient =
        t::foo_bar2_client::blocking::FooBarClient::new;
    let _: fn(rpc_core::Client) -> svc::empty_client::blocking::EmptyClient =
        svc::empty_client::blocking::EmptyClient::new;
    let _: fn(&svc::self_client::blocking::SelfClient, t::Ok) -> Res<t::Ok> =
        svc::self_client::blocking::SelfClient::ping;
    let _: fn(&svc::service2_client::blocking::ServiceClient, t::Methods) -> Res<t::Methods> =
        svc::service2_client::blocking::ServiceClient::ping;
    let _: fn(&protos::bare_client::blocking::BareClient, other::Msg) -> Res<protos::BareRequest> =
        protos::bare_client::blocking::BareClient::across;
    let _: fn(&r#type::use_client::blocking::UseClient, r#type::In) -> Res<protos::BareRequest> =
        r#type::use_client::blocking::UseClient::r#in;
    let _: fn(
        &t::nested::deep::deep_client::blocking::DeepClient,
        other::msg::Sub,
    ) -> Res<t::outer::middle::Inner> = t::nested::deep::deep_client::blocking::DeepClient::across;
    let _: fn(
        &t::nested::deep::deep_client::blocking::DeepClient,
        (),
    ) -> Call<t::Outer, other::Msg> = t::nested::deep::deep_client::blocking::DeepClient::stream;
}

#[test]
fn generated_stubs_work_end_to_end_over_tcp() {
    let server = Server::builder()
        .add_service(t::keywords_server::KeywordsServer::new(Kw))
        .add_service(t::streams_server::StreamsServer::new(Everything))
        .start("127.0.0.1:0", TransportKind::Tcp)
        .expect("serve");
    let connection = rpc_core::Client::builder()
        .transport(TransportKind::Tcp)
        .timeout(Duration::from_secs(10))
        .connect(server.local_addr())
        .expect("connect");
    let keywords = t::keywords_client::blocking::KeywordsClient::new(connection.clone());
    let streams = t::streams_client::blocking::StreamsClient::new(connection.clone());
    let mut streams_async = t::streams_client::StreamsClient::new(connection);

    let request = t::Result {
        r#type: "t".into(),
        r#match: false,
        self_: 41,
        r#async: "a".into(),
    };
    let reply = keywords
        .r#match(request.clone())
        .expect("match")
        .into_inner();
    assert!(reply.r#match);
    assert_eq!(reply.self_, 42);
    assert_eq!(reply.r#type, "t");
    let reply = t::keywords_client::KeywordsClient::from(Clone::clone(&keywords))
        .r#match(Request::new(request).with_timeout(Duration::from_secs(5)))
        .wait()
        .expect("the async match")
        .into_inner();
    assert_eq!(reply.self_, 42);

    // The renamed method reaches its own handler.
    let status = keywords.foo_async(t::Ok {}).unwrap_err();
    assert_eq!(status.code(), Code::AlreadyExists);
    assert_eq!(status.message(), "foo_async ran");
    assert_eq!(keywords.foo(t::Ok {}).unwrap().into_inner(), t::Err {});

    // google.protobuf.Empty is `()` on both sides.
    keywords.other(other::Msg::default()).expect("other");
    let failed = keywords
        .other(other::Msg {
            text: "fail".into(),
            sub: None,
        })
        .unwrap_err();
    assert_eq!(failed.code(), Code::InvalidArgument);

    // All four kinds, blocking and async.
    let outer = t::Outer::default();
    assert_eq!(streams.unary(outer.clone()).unwrap().into_inner(), outer);
    assert_eq!(
        streams_async
            .last(outer.clone())
            .wait()
            .unwrap()
            .into_inner(),
        outer
    );
    let total = streams.upload(vec![inner(1), inner(2), inner(39)]).unwrap();
    assert_eq!(total.into_inner().choice, Some(t::outer::Choice::Id(42)));
    let empty = streams.upload(Vec::new()).unwrap().into_inner();
    assert_eq!(empty.choice, Some(t::outer::Choice::Id(0)));
    let three = t::Outer {
        choice: Some(t::outer::Choice::Id(3)),
        ..Default::default()
    };
    let depths: Vec<i32> = streams
        .download(three.clone())
        .unwrap()
        .into_inner()
        .into_blocking_iter()
        .map(|m| m.unwrap().inner.unwrap().depth)
        .collect();
    assert_eq!(depths, [0, 1, 2]);
    let mut chat = streams.chat(()).expect("chat opens");
    for i in 0..3 {
        chat.send(&()).expect("send");
        assert_eq!(
            chat.recv().expect("a stamp").expect("not the end").seconds,
            i
        );
    }
    chat.close_send();
    assert_eq!(chat.recv().expect("the end, OK"), None);

    futures::executor::block_on(async {
        let total = streams_async
            .upload(stream::iter(vec![inner(5), inner(6)]))
            .await
            .unwrap();
        assert_eq!(total.into_inner().choice, Some(t::outer::Choice::Id(11)));
        let mut middles = streams_async.download(three).await.unwrap().into_inner();
        let mut n = 0;
        while let Some(m) = middles.message().await.unwrap() {
            assert_eq!(m.inner.unwrap().depth, n);
            n += 1;
        }
        assert_eq!(n, 3);
        let stamps: Vec<i64> = streams_async
            .chat(stream::iter(vec![(), (), (), ()]))
            .await
            .unwrap()
            .into_inner()
            .map(|s| s.unwrap().seconds)
            .collect()
            .await;
        assert_eq!(stamps, [0, 1, 2, 3]);
    });

    // A handler that returns an error status before streaming: the call fails with it.
    let download = &t::streams_server::SERVICE.methods[2];
    let status = streams
        .inner()
        .unary::<t::Outer, t::outer::Middle>(download, Request::new(outer))
        .unwrap_err();
    assert_eq!(status.code(), Code::Internal, "{status}");

    server.shutdown();
}
