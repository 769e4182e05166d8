//! Any bytes as an `.npz` archive, read every way quantkit reads one: `read_npz` (all
//! arrays), the batch-per-array source (`open_data`: `eval`, `quantize --calib` on a
//! single-input model) and the named-input feeds (`NamedFeeds`: an array per model input,
//! stacked or `NAME__K` per run) for a float input, an int64 token-id input and an int64
//! scalar. Every path returns arrays or an error.
#![no_main]
use libfuzzer_sys::fuzz_target;
use quantkit_data::npy::DType;
use quantkit_data::{BatchOptions, InputSpec, NamedFeeds, OpenOptions};

fuzz_target!(|data: &[u8]| {
    quantkit_fuzz::install_limits();
    let path = quantkit_fuzz::scratch_dir().join("fuzz.npz");
    if std::fs::write(&path, data).is_err() {
        return;
    }
    let _ = quantkit_data::npy::read_npz(&path);

    if let Ok(mut src) = quantkit_data::open_data(&path, &OpenOptions::default()) {
        let opts = BatchOptions {
            batch_size: 4,
            limit: Some(64),
            ..BatchOptions::default()
        };
        if let Ok(batches) = src.batches(&opts) {
            for b in batches.take(16) {
                if b.is_err() {
                    break;
                }
            }
        }
    }

    let specs = [
        InputSpec {
            name: "x".into(),
            dtype: Some(DType::F32),
            dims: Some(vec![None, Some(3)]),
        },
        InputSpec {
            name: "ids".into(),
            dtype: Some(DType::I64),
            dims: Some(vec![None]),
        },
        InputSpec {
            name: "sr".into(),
            dtype: Some(DType::I64),
            dims: Some(vec![]),
        },
    ];
    for n in [1, 3] {
        if let Ok(Some(mut feeds)) = NamedFeeds::open(&path, &specs[..n], None) {
            let _ = feeds.run_count(2, Some(16));
            if let Ok(runs) = feeds.runs(2, Some(16)) {
                for r in runs {
                    if r.is_err() {
                        break;
                    }
                }
            }
        }
    }
});
