use hello_world::greeter_client::GreeterClient;
use hello_world::HelloRequest;
use tonic::transport::Endpoint;
use tonic_health::pb::health_client::HealthClient;
use tonic_health::pb::HealthCheckRequest;

pub mod hello_world {
    tonic::include_proto!("helloworld");
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let dst = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "http://[::1]:50051".to_string());
    let channel = Endpoint::from_shared(dst)?.connect().await?;

    let mut health = HealthClient::new(channel.clone());
    let check = HealthCheckRequest {
        service: "helloworld.Greeter".into(),
    };
    let status = health.check(check).await?.into_inner().status();
    println!("health: {:?}", status);

    let mut client = GreeterClient::new(channel);

    let request = tonic::Request::new(HelloRequest {
        name: "Tonic".into(),
    });

    let response = client.say_hello(request).await?;

    println!("RESPONSE={:?}", response);
    Ok(())
}
