use super::*;

fn sample() -> Header {
    Header {
        kind: Kind::Message,
        flags: flags::OPEN | flags::END,
        credits: 7,
        call_id: 0x0102_0304_0506_0708,
        code: 0xdead_beef,
        timeout_us: 1_000_000,
        message_len: 100,
        segment_offset: 24,
        segment_len: 76,
    }
}

#[test]
fn header_round_trips_in_little_endian() {
    let mut buf = [0u8; HEADER_LEN];
    sample().encode(&mut buf);
    assert_eq!(&buf[0..6], b"RP\x02\x03\x03\x00");
    assert_eq!(buf[8], 0x08, "call id is little-endian");
    assert_eq!(Header::decode(&buf).unwrap(), sample());
    assert!(sample().is_last_segment());
    assert!(!sample().is_first_segment());
}

fn rule(result: Result<Header, Error>) -> Violation {
    match result {
        Err(Error::Protocol { violation, .. }) => violation,
        other => panic!("expected a violation, got {other:?}"),
    }
}

fn encoded(h: Header) -> [u8; HEADER_LEN] {
    let mut buf = [0u8; HEADER_LEN];
    h.encode(&mut buf);
    buf
}

#[test]
fn header_checks_name_their_rule() {
    let buf = encoded(sample());
    assert_eq!(rule(Header::decode(&buf[..39])), Violation::ShortFrame);
    let mut bad = buf;
    bad[0] = b'X';
    assert_eq!(rule(Header::decode(&bad)), Violation::BadMagic);
    let mut bad = buf;
    bad[2] = 1;
    assert_eq!(rule(Header::decode(&bad)), Violation::BadVersion);
    let mut bad = buf;
    bad[3] = 10;
    assert_eq!(rule(Header::decode(&bad)), Violation::UnknownKind);
    let mut bad = buf;
    bad[36] = 1;
    assert_eq!(rule(Header::decode(&bad)), Violation::NonzeroField);
    let ack_on_message = Header {
        flags: flags::ACK,
        ..sample()
    };
    assert_eq!(
        rule(Header::decode(&encoded(ack_on_message))),
        Violation::BadFlags
    );
    let past_end = Header {
        segment_len: 77,
        ..sample()
    };
    assert_eq!(
        rule(Header::decode(&encoded(past_end))),
        Violation::SegmentBounds
    );
    let empty = Header {
        segment_len: 0,
        ..sample()
    };
    assert_eq!(
        rule(Header::decode(&encoded(empty))),
        Violation::EmptySegment
    );
    let no_id = Header {
        call_id: 0,
        ..sample()
    };
    assert_eq!(rule(Header::decode(&encoded(no_id))), Violation::CallIdZero);
    let timeout_not_opening = Header {
        flags: 0,
        code: 0,
        ..sample()
    };
    assert_eq!(
        rule(Header::decode(&encoded(timeout_not_opening))),
        Violation::NonzeroField
    );
    let empty_credit = Header::new(Kind::Credit);
    assert_eq!(
        rule(Header::decode(&encoded(empty_credit))),
        Violation::EmptyCredit
    );
    let zero_window = Header {
        call_id: 1,
        ..Header::new(Kind::Window)
    };
    assert_eq!(
        rule(Header::decode(&encoded(zero_window))),
        Violation::WindowExcess
    );
    let cancel_with_payload = Header {
        call_id: 1,
        message_len: 4,
        segment_len: 4,
        ..Header::new(Kind::Cancel)
    };
    assert_eq!(
        rule(Header::decode(&encoded(cancel_with_payload))),
        Violation::NonzeroField
    );
}

fn hello() -> Hello {
    Hello {
        slot_count: 64,
        slot_size: 8192,
        max_message_size: 4 << 20,
        max_calls: 128,
        call_window: 1 << 20,
        max_metadata_size: 16 << 10,
    }
}

#[test]
fn hello_round_trips_and_validates() {
    let frame = hello().to_frame();
    let header = Header::decode(&frame).unwrap();
    assert_eq!(header.kind, Kind::Hello);
    assert_eq!(Hello::decode(&frame[HEADER_LEN..]).unwrap(), hello());
    assert_eq!(&frame[HEADER_LEN..HEADER_LEN + 4], b"RP\x02\x00");
    let out_of_range = [
        Hello {
            slot_count: 1,
            ..hello()
        },
        Hello {
            slot_size: 103,
            ..hello()
        },
        Hello {
            max_calls: 0,
            ..hello()
        },
        Hello {
            call_window: 0,
            ..hello()
        },
        Hello {
            max_metadata_size: 1023,
            ..hello()
        },
        Hello {
            max_message_size: 63,
            ..hello()
        },
    ];
    for h in out_of_range {
        assert!(
            matches!(
                Hello::decode(&h.encode()),
                Err(Error::Protocol {
                    violation: Violation::HelloOutOfRange,
                    ..
                })
            ),
            "{h:?}"
        );
    }
    let mut reserved = hello().encode();
    reserved[31] = 1;
    assert!(matches!(
        Hello::decode(&reserved),
        Err(Error::Protocol {
            violation: Violation::HelloMalformed,
            ..
        })
    ));
    assert!(matches!(
        Hello::decode(&hello().encode()[..16]),
        Err(Error::Protocol {
            violation: Violation::HelloMalformed,
            ..
        })
    ));
}

#[test]
fn a_version_1_hello_is_refused_as_a_version_mismatch() {
    // Version 1's 16-byte HELLO starts with slot_count: no `RP`.
    let mut v1 = [0u8; 16];
    v1[0..4].copy_from_slice(&64u32.to_le_bytes());
    assert!(matches!(
        Hello::decode(&v1),
        Err(Error::Protocol {
            violation: Violation::HelloMalformed,
            ..
        })
    ));
    // A future version announces itself.
    let mut v3 = hello().encode();
    v3[2] = 3;
    assert!(matches!(
        Hello::decode(&v3),
        Err(Error::UnsupportedVersion(3))
    ));
}

fn hello_rule(result: Result<Hello, Error>) -> Violation {
    match result {
        Err(Error::Protocol { violation, .. }) => violation,
        other => panic!("expected a violation, got {other:?}"),
    }
}

#[test]
fn violation_hello_expected() {
    let mut frame = [0u8; HEADER_LEN];
    Header {
        credits: 1,
        ..Header::new(Kind::Credit)
    }
    .encode(&mut frame);
    assert_eq!(
        hello_rule(Hello::from_frame(&frame)),
        Violation::HelloExpected
    );
}

#[test]
fn violation_hello_malformed() {
    let frame = hello().to_frame();
    assert_eq!(
        hello_rule(Hello::from_frame(&frame[..60])),
        Violation::HelloMalformed
    );
    let mut short = frame;
    short[24] = 16; // message_len 16 (version 1's HELLO size)
    short[32] = 16;
    assert_eq!(
        hello_rule(Hello::from_frame(&short[..56])),
        Violation::HelloMalformed
    );
    let mut reserved = frame;
    reserved[HEADER_LEN + 3] = 1;
    assert_eq!(
        hello_rule(Hello::from_frame(&reserved)),
        Violation::HelloMalformed
    );
}

#[test]
fn violation_hello_out_of_range() {
    let frame = Hello {
        slot_count: 70_000,
        ..hello()
    }
    .to_frame();
    assert_eq!(
        hello_rule(Hello::from_frame(&frame)),
        Violation::HelloOutOfRange
    );
}

#[test]
fn a_version_1_hello_frame_is_a_version_mismatch() {
    let mut v1 = [0u8; HEADER_LEN + 16];
    v1[0..4].copy_from_slice(b"RP\x01\x01");
    assert!(matches!(
        Hello::from_frame(&v1),
        Err(Error::UnsupportedVersion(1))
    ));
}

#[test]
fn the_start_of_a_hello_frame_is_judged_byte_by_byte() {
    let frame = hello().to_frame();
    // Every prefix of a good HELLO frame may go on.
    for n in 0..=frame.len() {
        Hello::check_frame_start(&frame[..n]).expect("a good prefix");
    }
    // A version 1 peer is known by its third byte, an HTTP client by its first.
    assert!(matches!(
        Hello::check_frame_start(b"RP\x01"),
        Err(Error::UnsupportedVersion(1))
    ));
    for start in [&b"G"[..], b"RX", b"\xab\xab\xab"] {
        assert_eq!(
            hello_rule(Hello::check_frame_start(start).map(|()| hello())),
            Violation::BadMagic,
            "{start:?}"
        );
    }
}

#[test]
fn every_violation_row_has_a_test_named_after_it() {
    let sources = [include_str!("tests.rs"), include_str!("../conn/tests.rs")];
    for v in Violation::ALL {
        let test = format!("fn violation_{}()", v.name().replace('-', "_"));
        assert!(
            sources.iter().any(|s| s.contains(&test)),
            "no test `{test}` for the row `{}`",
            v.name()
        );
    }
}

#[test]
fn to_frame_is_the_header_with_its_segment_length_then_the_payload() {
    let h = Header {
        flags: flags::OPEN | flags::END,
        call_id: 9,
        code: 77,
        message_len: 3,
        segment_len: 1234, // overwritten: a whole frame's segment is its payload
        ..Header::new(Kind::Message)
    };
    let frame = h.to_frame(b"abc");
    assert_eq!(frame.len(), HEADER_LEN + 3);
    assert_eq!(&frame[HEADER_LEN..], b"abc");
    let decoded = Header::decode(&frame).expect("a valid header");
    assert_eq!(
        decoded,
        Header {
            segment_len: 3,
            ..h
        }
    );
}

/// The quick path of `Header::decode` accepts exactly what the full checks accept, over every
/// combination of kind, flags and the fields the per-kind table constrains (zero, non-zero),
/// with consistent and inconsistent segment bounds, and a stray reserved byte.
#[test]
fn quick_header_path_agrees_with_the_full_checks() {
    let mut accepted = 0;
    for kind in 0u8..=10 {
        for fl in 0u16..8 {
            for fields in 0u32..64 {
                let bit = |i: u32| fields & (1 << i) != 0;
                let mut buf = [0u8; HEADER_LEN];
                buf[..3].copy_from_slice(&[b'R', b'P', VERSION]);
                buf[3] = kind;
                buf[4..6].copy_from_slice(&fl.to_le_bytes());
                buf[6..8].copy_from_slice(&u16::from(bit(0)).to_le_bytes());
                buf[8..16].copy_from_slice(&u64::from(bit(1)).to_le_bytes());
                buf[16..20].copy_from_slice(&u32::from(bit(2)).to_le_bytes());
                buf[20..24].copy_from_slice(&u32::from(bit(3)).to_le_bytes());
                let (message_len, offset, segment) = match (bit(4), bit(5)) {
                    (false, false) => (10u32, 0u32, 10u32),
                    (true, false) => (0, 0, 0),
                    (false, true) => (10, 4, 6),
                    (true, true) => (10, 8, 6),
                };
                buf[24..28].copy_from_slice(&message_len.to_le_bytes());
                buf[28..32].copy_from_slice(&offset.to_le_bytes());
                buf[32..36].copy_from_slice(&segment.to_le_bytes());
                for reserved in [0u8, 1] {
                    buf[39] = reserved;
                    let quick = Header::quick_call_frame(&buf);
                    let full = Header::decode_checked(&buf).ok();
                    if let Some(h) = quick {
                        assert_eq!(Some(h), full, "quick path accepted {buf:?}");
                        accepted += 1;
                    }
                    assert_eq!(Header::decode(&buf).ok(), full, "{buf:?}");
                }
            }
        }
    }
    assert!(
        accepted > 100,
        "the quick path took only {accepted} headers"
    );
}
