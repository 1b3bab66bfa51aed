//! Frame decoding and the protocol core under libFuzzer: the input is a script of frames and
//! application calls (`rpc_proto::fuzz` describes it and what is checked).

#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    rpc_proto::fuzz::drive(data);
});
