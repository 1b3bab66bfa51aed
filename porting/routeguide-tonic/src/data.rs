use crate::routeguide::{Feature, Point};

/// The features this guide knows: invented places around a lake.
pub fn load() -> Vec<Feature> {
    [
        ("Boathouse", 473_120_000, 85_410_000),
        ("North pier", 473_180_000, 85_420_000),
        ("Old mill", 473_050_000, 85_530_000),
        ("Lookout tower", 473_260_000, 85_600_000),
        ("Ferry landing", 472_990_000, 85_380_000),
        ("Chapel", 473_330_000, 85_290_000),
        ("", 473_000_000, 85_000_000),
    ]
    .into_iter()
    .map(|(name, latitude, longitude)| Feature {
        name: name.to_string(),
        location: Some(Point {
            latitude,
            longitude,
        }),
    })
    .collect()
}
