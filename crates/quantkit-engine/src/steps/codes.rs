//! Steps on 8-bit codes, produced by `compile/codes.rs`: a 256-entry table (element-wise
//! ops) and/or a layout operator on the codes.

use super::{bad, check_dtype, first, GraphOp, Kernel};
use crate::error::Result;
use crate::value::{tensor_i8, tensor_u8, Val};
use crate::Step;
use quantkit_graph::{DType, Data, Tensor};
use quantkit_kernels::par::{self, SplitKind};

/// Estimated ns per element of a table lookup on one core (for `par::for_chunks`): the
/// scalar loop's cost, an overestimate where the `vpermi2b` kernel runs.
const TABLE_NS: f64 = 0.4;

/// A 256-entry map of 8-bit codes: `table[code as u8]` is the output code's byte.
#[derive(Clone)]
pub(crate) struct Table {
    pub bytes: Vec<u8>,
    pub out: DType,
}

impl Table {
    /// Applies the table in `v`'s own buffer, keeping shape and layout.
    pub(super) fn apply(&self, v: Val) -> Val {
        Val {
            tensor: self.apply_in_place(v.tensor),
            nhwc: v.nhwc,
        }
    }

    /// [`Table::apply`] on a borrowed value (a copy, then [`Table::apply_in_place`]).
    pub(super) fn apply_ref(&self, v: &Val) -> Val {
        let tensor = match &v.tensor.data {
            Data::U8(d) => tensor_u8(v.tensor.shape.clone(), d.clone()),
            Data::I8(d) => tensor_i8(v.tensor.shape.clone(), d.clone()),
            _ => unreachable!("callers check for 8-bit codes"),
        };
        Val {
            tensor: self.apply_in_place(tensor),
            nhwc: v.nhwc,
        }
    }

    /// Maps the codes of the 8-bit tensor `t` through the table in its own buffer (the
    /// kernels' [`quantkit_kernels::lut::apply_codes`]) and retypes it to the table's
    /// output type. Large tensors are split across the pool's threads in contiguous chunks
    /// (each byte looked up alone, so any split gives the same bytes).
    pub(crate) fn apply_in_place(&self, t: Tensor) -> Tensor {
        let table: &[u8; 256] = self.bytes[..].try_into().expect("256 entries");
        let Tensor { shape, data, .. } = t;
        let mut bytes = match data {
            Data::U8(d) => d,
            Data::I8(d) => bytes_of_i8(d),
            _ => unreachable!("callers check for 8-bit codes"),
        };
        par::for_chunks(SplitKind::Eltwise, &mut bytes, TABLE_NS, 1, |_, chunk| {
            quantkit_kernels::lut::apply_codes(table, chunk)
        });
        match self.out {
            DType::U8 => tensor_u8(shape, bytes),
            _ => tensor_i8(shape, i8_of_bytes(bytes)),
        }
    }
}

/// The bytes of `v`, reusing its buffer.
fn bytes_of_i8(v: Vec<i8>) -> Vec<u8> {
    let mut v = std::mem::ManuallyDrop::new(v);
    // SAFETY: i8 and u8 have the same size and alignment and every bit pattern is valid;
    // the buffer's ownership moves to the new Vec (the old one is never dropped).
    unsafe { Vec::from_raw_parts(v.as_mut_ptr().cast::<u8>(), v.len(), v.capacity()) }
}

/// `v` as i8, reusing its buffer.
fn i8_of_bytes(v: Vec<u8>) -> Vec<i8> {
    let mut v = std::mem::ManuallyDrop::new(v);
    // SAFETY: as in `bytes_of_i8`.
    unsafe { Vec::from_raw_parts(v.as_mut_ptr().cast::<i8>(), v.len(), v.capacity()) }
}

/// An operator on codes: a layout op (the graph crate's Flatten/Reshape/Transpose/...
/// applied to the 8-bit tensor in ONNX order) and/or an element-wise table.
pub(crate) struct CodeStep {
    /// Layout operator, run on the codes with the step's other inputs (constants).
    pub layout: Option<GraphOp>,
    pub table: Option<Table>,
    pub x_dtype: DType,
    /// Inputs of the layout operator replaced by these constants (Pad's constant value as
    /// a code).
    pub consts: Vec<(usize, Tensor)>,
    /// The layout operator is a nearest-mode Resize: 4-D codes are gathered directly in
    /// their layout (NHWC stays NHWC) by the source index of each output position.
    pub nearest: bool,
    pub desc: String,
}

/// Nearest Resize of 4-D codes by source positions: the graph's own Resize on a probe
/// `[1, 1, h, w]` holding each position's flat index (exact in f32 below 2^24) gives, for
/// every output position, the input position it copies (nearest resizing copies values
/// independently of them, per image and channel). `None` when the probe does not keep
/// batch and channels (a scale on those axes): the caller runs the operator itself.
fn resize_nearest(op: &GraphOp, x: &Val, args: &[Option<&Tensor>]) -> Result<Option<Val>> {
    let s = &x.tensor.shape;
    let [n, c, h, w] = if x.nhwc {
        [s[0], s[3], s[1], s[2]]
    } else {
        [s[0], s[1], s[2], s[3]]
    };
    // Empty inputs (and outputs, below) go to the operator itself: there is nothing to
    // gather, and the per-plane loops need non-empty planes.
    if h * w >= 1 << 24 || n * c * h * w == 0 {
        return Ok(None);
    }
    let probe = Tensor::from_f32(&[1, 1, h, w], (0..h * w).map(|i| i as f32).collect());
    let mut a: Vec<Option<&Tensor>> = args.to_vec();
    a[0] = Some(&probe);
    let idx = op.eval(&a)?.remove(0);
    let (oh, ow) = match idx.shape.as_slice() {
        [1, 1, oh, ow] => (*oh, *ow),
        _ => return Ok(None),
    };
    if oh * ow == 0 {
        return Ok(None);
    }
    let idx: Vec<usize> = idx.to_f32_vec().iter().map(|&v| v as usize).collect();
    if idx.iter().any(|&i| i >= h * w) {
        return Ok(None);
    }
    let src: &[u8] = match &x.tensor.data {
        Data::U8(d) => d,
        // SAFETY: i8 and u8 have the same size and alignment; every bit pattern is valid.
        Data::I8(d) => unsafe { std::slice::from_raw_parts(d.as_ptr().cast(), d.len()) },
        _ => return Ok(None),
    };
    let mut out = vec![0u8; n * c * oh * ow];
    if x.nhwc {
        for (img, dst) in src.chunks(h * w * c).zip(out.chunks_mut(oh * ow * c)) {
            for (d, &i) in dst.chunks_mut(c).zip(&idx) {
                d.copy_from_slice(&img[i * c..][..c]);
            }
        }
    } else {
        for (plane, dst) in src.chunks(h * w).zip(out.chunks_mut(oh * ow)) {
            for (d, &i) in dst.iter_mut().zip(&idx) {
                *d = plane[i];
            }
        }
    }
    let shape = if x.nhwc {
        vec![n, oh, ow, c]
    } else {
        vec![n, c, oh, ow]
    };
    let tensor = match x.tensor.dtype {
        DType::U8 => tensor_u8(shape, out),
        _ => tensor_i8(shape, out.into_iter().map(|b| b as i8).collect()),
    };
    Ok(Some(Val {
        tensor,
        nhwc: x.nhwc,
    }))
}

/// Whether `op` is the Transpose between a 4-D value's NHWC and NCHW orders in the
/// direction that leaves its bytes where they are: perm `[0, 3, 1, 2]` of a value stored in
/// ONNX order (an NHWC model input, as Keras exports start) is that value's bytes read as
/// NHWC; perm `[0, 2, 3, 1]` of a value the plan keeps in NHWC is its bytes in ONNX order.
/// The step then only flips the layout flag instead of moving every code.
fn relabels(op: &GraphOp, x: &Val) -> bool {
    if !op.node.is(quantkit_graph::OpKind::Transpose) || x.tensor.rank() != 4 {
        return false;
    }
    match op.node.attr_ints("perm") {
        Ok(Some(p)) if x.nhwc => p == [0, 2, 3, 1],
        Ok(Some(p)) => p == [0, 3, 1, 2],
        _ => false,
    }
}

impl Kernel for CodeStep {
    fn per_image(&self, consts: &[Option<&Tensor>]) -> bool {
        // The table maps codes one by one; the layout operator decides, with the
        // constants this step substitutes for its inputs.
        let Some(op) = &self.layout else {
            return true;
        };
        let mut c: Vec<Option<&Tensor>> = consts.to_vec();
        for (i, t) in &self.consts {
            if let Some(slot) = c.get_mut(*i) {
                *slot = Some(t);
            }
        }
        crate::batch::graph_op_per_image(&op.node, &c)
    }
    fn run(&self, step: &Step, inputs: &[Option<&Val>]) -> Result<Vec<Val>> {
        let x = first(step, inputs)?;
        check_dtype(step, x, self.x_dtype)?;
        let v = match &self.layout {
            Some(op) if relabels(op, x) => Val {
                tensor: x.tensor.clone(),
                nhwc: !x.nhwc,
            },
            Some(op) => {
                let owned: Vec<Option<std::borrow::Cow<'_, Tensor>>> = inputs
                    .iter()
                    .enumerate()
                    .map(|(k, v)| {
                        // Input 0 is converted only when the operator itself runs.
                        if k == 0 {
                            None
                        } else {
                            v.map(Val::to_nchw)
                        }
                    })
                    .collect();
                let mut args: Vec<Option<&Tensor>> = owned.iter().map(|c| c.as_deref()).collect();
                for (k, t) in &self.consts {
                    if args.len() <= *k {
                        args.resize(*k + 1, None);
                    }
                    args[*k] = Some(t);
                }
                let fast = if self.nearest && x.tensor.rank() == 4 {
                    resize_nearest(op, x, &args)?
                } else {
                    None
                };
                match fast {
                    Some(v) => v,
                    None => {
                        let x0 = x.to_nchw();
                        args[0] = Some(&x0);
                        let t = op.eval(&args)?.into_iter().next().ok_or_else(|| {
                            bad(
                                step,
                                "output 0",
                                "the layout operator produced nothing".into(),
                            )
                        })?;
                        Val::nchw(t)
                    }
                }
            }
            // A table alone reads the input in place (no copy first).
            None => {
                return Ok(vec![match &self.table {
                    Some(tb) => tb.apply_ref(x),
                    None => x.clone(),
                }])
            }
        };
        Ok(vec![match &self.table {
            Some(tb) => tb.apply(v),
            None => v,
        }])
    }
    fn describe(&self) -> String {
        self.desc.clone()
    }
    fn as_table_step(&self) -> Option<&CodeStep> {
        (self.layout.is_none() && self.table.is_some() && self.consts.is_empty()).then_some(self)
    }
}

impl CodeStep {
    /// `self` then `next` as one table-only step: `next.table[self.table[b]]` for every
    /// code byte `b` (each table maps a code to a code, so the composition is exact).
    /// `None` unless both are table-only and `next` reads the codes `self` writes.
    pub(crate) fn then(&self, next: &CodeStep) -> Option<CodeStep> {
        let (t1, t2) = (self.table.as_ref()?, next.table.as_ref()?);
        if self.layout.is_some() || next.layout.is_some() || t1.out != next.x_dtype {
            return None;
        }
        let bytes = t1.bytes.iter().map(|&b| t2.bytes[b as usize]).collect();
        Some(CodeStep {
            layout: None,
            table: Some(Table { bytes, out: t2.out }),
            x_dtype: self.x_dtype,
            consts: Vec::new(),
            nearest: false,
            desc: format!("{}, then {}", self.desc, next.desc),
        })
    }
}
