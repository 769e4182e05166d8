//! The graph side of feeding a model from data: the [`InputSpec`]s quantkit-data checks an
//! `.npz` of named arrays against ([`input_specs`], [`open_data_for_graph`]) and the
//! conversion of what it reads into executor tensors ([`to_tensor`], [`run_tensors`]).
//! `quantize` (calibration), `run`, `eval` and `bench` all feed models through these, so
//! the naming scheme and its checks live in one place (`quantkit_data::feed`).

use crate::error::{PtqError, Result};
use quantkit_data::npy::{DType as NpyDType, NpyArray, NpyData};
use quantkit_data::{DataError, DataSource, InputSpec, OpenOptions, Run};
use quantkit_graph::{DType, Data, Dim, Graph, Tensor};
use std::path::Path;

/// The `.npy` dtype of a graph element type, when `.npy` has one.
pub fn npy_dtype(d: DType) -> Option<NpyDType> {
    Some(match d {
        DType::F32 => NpyDType::F32,
        DType::F64 => NpyDType::F64,
        DType::F16 => NpyDType::F16,
        DType::I8 => NpyDType::I8,
        DType::U8 => NpyDType::U8,
        DType::I16 => NpyDType::I16,
        DType::U16 => NpyDType::U16,
        DType::I32 => NpyDType::I32,
        DType::U32 => NpyDType::U32,
        DType::I64 => NpyDType::I64,
        DType::U64 => NpyDType::U64,
        DType::Bool => NpyDType::Bool,
        _ => return None,
    })
}

/// The inputs data must feed: every graph input that no initializer provides, with its
/// declared type and dimensions (symbolic and unknown dimensions are `None`).
pub fn input_specs(g: &Graph) -> Result<Vec<InputSpec>> {
    g.inputs
        .iter()
        .filter(|i| !g.initializers.contains_key(&i.name))
        .map(|vi| {
            let dtype = match vi.dtype {
                None => None,
                Some(d) => Some(npy_dtype(d).ok_or_else(|| PtqError::UnsupportedInput {
                    input: vi.name.clone(),
                    reason: format!("type {d} has no .npy equivalent to feed it from"),
                })?),
            };
            Ok(InputSpec {
                name: vi.name.clone(),
                dtype,
                dims: vi
                    .shape
                    .as_ref()
                    .map(|s| s.iter().map(Dim::known).collect()),
            })
        })
        .collect()
}

/// Opens data for `g`: an `.npz` whose arrays are named after `g`'s inputs feeds all of
/// them ([`DataSource::Named`]); anything else opens as `quantkit_data::open_data` does.
pub fn open_data_for_graph(
    g: &Graph,
    path: impl AsRef<Path>,
    options: &OpenOptions,
) -> Result<DataSource> {
    let specs = input_specs(g)?;
    Ok(quantkit_data::open_data_for(path, &specs, options)?)
}

/// An array as an executor tensor, with its own dtype.
pub fn to_tensor(a: NpyArray) -> Result<Tensor> {
    let data = match a.data {
        NpyData::Bool(v) => Data::Bool(v),
        NpyData::U8(v) => Data::U8(v),
        NpyData::I8(v) => Data::I8(v),
        NpyData::U16(v) => Data::U16(v),
        NpyData::I16(v) => Data::I16(v),
        NpyData::U32(v) => Data::U32(v),
        NpyData::I32(v) => Data::I32(v),
        NpyData::U64(v) => Data::U64(v),
        NpyData::I64(v) => Data::I64(v),
        NpyData::F16(v) => Data::F16(v),
        NpyData::F32(v) => Data::F32(v),
        NpyData::F64(v) => Data::F64(v),
    };
    // NpyArray keeps its element count equal to its shape's, so this cannot fail.
    Tensor::new(a.shape, data)
        .map_err(|e| PtqError::Data(Box::new(DataError::InvalidArgument(e.to_string()))))
}

/// A run's arrays as `(input name, tensor)` pairs for the executor.
pub fn run_tensors(run: Run) -> Result<Vec<(String, Tensor)>> {
    run.arrays
        .into_iter()
        .map(|(n, a)| Ok((n, to_tensor(a)?)))
        .collect()
}
