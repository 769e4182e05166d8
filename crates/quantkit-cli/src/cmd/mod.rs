//! One module per subcommand (and `progress`, their progress on stderr).

pub mod analyze;
pub mod bench;
pub mod bench_model;
pub mod check;
pub mod conformance;
pub mod demo;
pub mod engine_profile;
pub mod eval;
pub mod inspect;
pub mod progress;
pub mod qat;
pub mod qat_plot;
pub mod quantize;
pub mod run;
pub mod target;
pub mod tensor;
pub mod train;
