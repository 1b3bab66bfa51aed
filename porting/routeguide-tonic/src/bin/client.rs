use std::error::Error;
use std::time::Duration;

use tokio::time;
use tonic::transport::Channel;
use tonic::Request;

use routeguide::route_guide_client::RouteGuideClient;
use routeguide::{Point, Rectangle, RouteNote};

pub mod routeguide {
    tonic::include_proto!("routeguide");
}

async fn print_feature(
    client: &mut RouteGuideClient<Channel>,
    point: Point,
) -> Result<(), Box<dyn Error>> {
    let response = client.get_feature(Request::new(point)).await?;
    println!("FEATURE = {:?}", response.into_inner());
    Ok(())
}

async fn print_features(client: &mut RouteGuideClient<Channel>) -> Result<(), Box<dyn Error>> {
    let rectangle = Rectangle {
        lo: Some(Point {
            latitude: 473_000_000,
            longitude: 85_300_000,
        }),
        hi: Some(Point {
            latitude: 473_300_000,
            longitude: 85_650_000,
        }),
    };

    let mut stream = client
        .list_features(Request::new(rectangle))
        .await?
        .into_inner();

    while let Some(feature) = stream.message().await? {
        println!("FEATURE IN RECTANGLE = {:?}", feature);
    }

    Ok(())
}

async fn run_record_route(client: &mut RouteGuideClient<Channel>) -> Result<(), Box<dyn Error>> {
    // Along the shore: three features, and points between them.
    let points = vec![
        Point {
            latitude: 472_990_000,
            longitude: 85_380_000,
        },
        Point {
            latitude: 473_050_000,
            longitude: 85_400_000,
        },
        Point {
            latitude: 473_120_000,
            longitude: 85_410_000,
        },
        Point {
            latitude: 473_150_000,
            longitude: 85_415_000,
        },
        Point {
            latitude: 473_180_000,
            longitude: 85_420_000,
        },
    ];

    println!("Traversing {} points", points.len());
    let request = Request::new(tokio_stream::iter(points));

    match client.record_route(request).await {
        Ok(response) => {
            let summary = response.into_inner();
            println!(
                "SUMMARY: {} points, {} features, {} metres",
                summary.point_count, summary.feature_count, summary.distance
            );
        }
        Err(e) => println!("something went wrong: {:?}", e),
    }

    Ok(())
}

async fn run_route_chat(client: &mut RouteGuideClient<Channel>) -> Result<(), Box<dyn Error>> {
    let outbound = async_stream::stream! {
        let mut interval = time::interval(Duration::from_millis(20));

        for i in 0..6 {
            interval.tick().await;
            let note = RouteNote {
                location: Some(Point {
                    latitude: 473_000_000 + i % 2,
                    longitude: 85_000_000,
                }),
                message: format!("note {}", i),
            };

            yield note;
        }
    };

    let response = client.route_chat(Request::new(outbound)).await?;
    let mut inbound = response.into_inner();

    while let Some(note) = inbound.message().await? {
        println!("NOTE = {:?}", note);
    }

    Ok(())
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn Error>> {
    let dst = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "http://[::1]:10000".to_string());
    let mut client = RouteGuideClient::connect(dst).await?;

    println!("*** SIMPLE RPC ***");
    print_feature(
        &mut client,
        Point {
            latitude: 473_260_000,
            longitude: 85_600_000,
        },
    )
    .await?;
    print_feature(
        &mut client,
        Point {
            latitude: 1,
            longitude: 2,
        },
    )
    .await?;

    println!("\n*** SERVER STREAMING ***");
    print_features(&mut client).await?;

    println!("\n*** CLIENT STREAMING ***");
    run_record_route(&mut client).await?;

    println!("\n*** BIDIRECTIONAL STREAMING ***");
    run_route_chat(&mut client).await?;

    Ok(())
}
