#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| fuzzing::h2_frames(data));
