//! One module per subcommand.

pub mod bench;
pub mod demo;
pub mod tensor;
