//! Any bytes as an IDX file (plain or gzip): an array or an error.
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    quantkit_fuzz::install_limits();
    let _ = quantkit_data::idx::read_idx_bytes(std::path::Path::new("fuzz.idx"), data);
});
