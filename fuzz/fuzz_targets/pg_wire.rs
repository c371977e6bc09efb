#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| fuzzing::pg_wire(data));
