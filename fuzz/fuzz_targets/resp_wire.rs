#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| fuzzing::resp_wire(data));
