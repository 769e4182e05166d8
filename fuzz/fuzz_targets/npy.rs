//! Any bytes as a `.npy` file: an array or an error.
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    quantkit_fuzz::install_limits();
    let _ = quantkit_data::npy::read_npy_bytes(std::path::Path::new("fuzz.npy"), data);
});
