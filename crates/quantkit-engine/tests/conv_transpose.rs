//! The integer ConvTranspose step (issue 19): `DQ(x) → ConvTranspose(DQ(w) [, DQ(b)])
//! [→ Relu | Clip] → Q` against
//! - an i64 reference written here from the ONNX definition (scatter of
//!   `(x − zx)(w − zw)`, pads/auto_pad/output_shape/output_padding resolved by this file's
//!   own formulas) followed by the engine's documented output stage (float mode:
//!   `reference::float_output_i64`; fixed-point mode: quantkit-core's
//!   `QuantizedMultiplier::apply` with double rounding), **exactly**;
//! - the float executor on the same QDQ graph (`Q(ConvTranspose(DQ(x), DQ(w)) + DQ(b))`,
//!   f32 accumulation), within **one code**: the executor sums `s_x·s_w·(x − zx)(w − zw)`
//!   in f32 in its own order, so a result within an f32 rounding of a .5 boundary can round
//!   the other way — the same reason the conv steps are tested against the exact
//!   `QLinearConv` reference and not against the float executor.
//!
//! Every SIMD path of the kernel is compared with scalar bit for bit in
//! `quantkit-kernels/tests/deconv.rs`.

mod common;

use common::Lcg;
use quantkit_core::fixed_point::{FixedPointRounding, QuantizedMultiplier};
use quantkit_engine::{compile, EngineOptions, Placement, RequantMode};
use quantkit_graph::{execute, AttrValue, DType, Data, Graph, Node, Tensor, ValueInfo};
use quantkit_kernels::reference::float_output_i64;

#[derive(Clone, Debug)]
enum Pads {
    Explicit([usize; 4]),
    SameUpper,
    SameLower,
    /// `output_shape` (spatial), with `auto_pad` SAME_UPPER when the flag is set.
    OutputShape([usize; 2], bool),
}

#[derive(Clone, Debug)]
struct Case {
    act: DType,
    out: DType,
    n: usize,
    c_in: usize,
    c_out: usize,
    hw: [usize; 2],
    k: [usize; 2],
    group: usize,
    strides: [usize; 2],
    dilations: [usize; 2],
    output_padding: [usize; 2],
    pads: Pads,
    per_channel: bool,
    bias: bool,
    /// `None`, `Some((0, inf))` for Relu, `Some((a, b))` for Clip(a, b).
    act_fn: Option<(f32, f32)>,
    x_zp: Option<i32>,
    y_zp: Option<i32>,
    seed: u64,
}

impl Default for Case {
    fn default() -> Self {
        Case {
            act: DType::U8,
            out: DType::U8,
            n: 2,
            c_in: 5,
            c_out: 4,
            hw: [5, 6],
            k: [2, 2],
            group: 1,
            strides: [2, 2],
            dilations: [1, 1],
            output_padding: [0, 0],
            pads: Pads::Explicit([0; 4]),
            per_channel: true,
            bias: true,
            act_fn: None,
            x_zp: None,
            y_zp: None,
            seed: 1,
        }
    }
}

fn range(t: DType) -> (i32, i32) {
    if t == DType::U8 {
        (0, 255)
    } else {
        (-128, 127)
    }
}

fn scalar(dtype: DType, v: i32) -> Tensor {
    let data = match dtype {
        DType::U8 => Data::U8(vec![v as u8]),
        _ => Data::I8(vec![v as i8]),
    };
    Tensor::new(vec![], data).unwrap()
}

fn vec1<T>(v: Vec<T>, mk: fn(Vec<T>) -> Data) -> Tensor {
    let shape = if v.len() == 1 { vec![] } else { vec![v.len()] };
    Tensor::new(shape, mk(v)).unwrap()
}

/// Begin pads and output size per axis, from the ONNX ConvTranspose definition.
fn geometry(cs: &Case) -> ([usize; 2], [usize; 2]) {
    let mut pb = [0; 2];
    let mut os = [0; 2];
    for i in 0..2 {
        let full = cs.strides[i] * (cs.hw[i] - 1)
            + cs.output_padding[i]
            + cs.dilations[i] * (cs.k[i] - 1)
            + 1;
        let (out, upper) = match &cs.pads {
            Pads::Explicit(p) => {
                pb[i] = p[i];
                os[i] = full - p[i] - p[i + 2];
                continue;
            }
            Pads::SameUpper => (cs.hw[i] * cs.strides[i], true),
            Pads::SameLower => (cs.hw[i] * cs.strides[i], false),
            Pads::OutputShape(o, upper) => (o[i], *upper),
        };
        let total = full - out;
        pb[i] = if upper { total / 2 } else { total - total / 2 };
        os[i] = out;
    }
    (pb, os)
}

fn run_case(cs: &Case) {
    for mode in [RequantMode::Float, RequantMode::FixedPoint] {
        check(cs, mode);
    }
}

fn check(cs: &Case, mode: RequantMode) {
    let mut rng = Lcg(cs.seed);
    let (xlo, xhi) = range(cs.act);
    let (ylo, yhi) = range(cs.out);
    let x_zp = cs.x_zp.unwrap_or_else(|| rng.int(xlo, xhi));
    let y_zp = cs.y_zp.unwrap_or_else(|| rng.int(ylo, yhi));
    let x_s = 0.02f32;
    let (g, cig, cog) = (cs.group, cs.c_in / cs.group, cs.c_out / cs.group);
    let [kh, kw] = cs.k;
    let wv: Vec<i8> = (0..cs.c_in * cog * kh * kw)
        .map(|_| rng.int(-127, 127) as i8)
        .collect();
    let nch = if cs.per_channel { cog } else { 1 };
    let w_s: Vec<f32> = (0..nch).map(|_| rng.float(0.002, 0.02)).collect();
    let w_z: Vec<i8> = (0..nch).map(|_| rng.int(-4, 4) as i8).collect();
    // Output channel oc = group·cog + j takes the axis-1 entry j.
    let ws_of = |oc: usize| w_s[if nch == 1 { 0 } else { oc % cog }];
    let wz_of = |oc: usize| w_z[if nch == 1 { 0 } else { oc % cog }] as i64;
    let b: Vec<i32> = (0..cs.c_out).map(|_| rng.int(-3000, 3000)).collect();
    let b_s: Vec<f32> = (0..cs.c_out).map(|oc| x_s * ws_of(oc)).collect();
    let taps = (cs.k[0].div_ceil(cs.strides[0]) * cs.k[1].div_ceil(cs.strides[1])) as f32;
    // Output scale small enough that some results saturate at both ends.
    let y_s = 0.03f32 * (cig as f32 * taps) / 4.0;

    let mut gr = Graph {
        opset_imports: vec![(String::new(), 17)],
        ..Default::default()
    };
    let xshape = [cs.n, cs.c_in, cs.hw[0], cs.hw[1]];
    gr.inputs = vec![ValueInfo::new("xq", cs.act, &xshape)];
    gr.outputs = vec![ValueInfo::new("yq", cs.out, &[])];
    let init = &mut gr.initializers;
    init.insert("xs".into(), Tensor::scalar_f32(x_s));
    init.insert("xz".into(), scalar(cs.act, x_zp));
    init.insert(
        "w".into(),
        Tensor::new(vec![cs.c_in, cog, kh, kw], Data::I8(wv.clone())).unwrap(),
    );
    init.insert("ws".into(), vec1(w_s.clone(), Data::F32));
    init.insert("wz".into(), vec1(w_z.clone(), Data::I8));
    init.insert(
        "b".into(),
        Tensor::new(vec![cs.c_out], Data::I32(b.clone())).unwrap(),
    );
    init.insert("bs".into(), vec1(b_s, Data::F32));
    init.insert("bz".into(), vec1(vec![0; cs.c_out], Data::I32));
    init.insert("ys".into(), Tensor::scalar_f32(y_s));
    init.insert("yz".into(), scalar(cs.out, y_zp));
    let ints = |v: &[usize]| AttrValue::Ints(v.iter().map(|&x| x as i64).collect());
    let mut ct = Node::new(
        "deconv",
        "ConvTranspose",
        if cs.bias {
            &["xf", "wf", "bf"][..]
        } else {
            &["xf", "wf"][..]
        },
        &["c"],
    )
    .with_attr("group", AttrValue::Int(g as i64))
    .with_attr("strides", ints(&cs.strides))
    .with_attr("dilations", ints(&cs.dilations))
    .with_attr("output_padding", ints(&cs.output_padding));
    ct = match &cs.pads {
        Pads::Explicit(p) => ct.with_attr("pads", ints(p)),
        Pads::SameUpper => ct.with_attr("auto_pad", AttrValue::String("SAME_UPPER".into())),
        Pads::SameLower => ct.with_attr("auto_pad", AttrValue::String("SAME_LOWER".into())),
        Pads::OutputShape(o, upper) => {
            let ct = ct.with_attr("output_shape", ints(o));
            if *upper {
                ct.with_attr("auto_pad", AttrValue::String("SAME_UPPER".into()))
            } else {
                ct
            }
        }
    };
    let mut nodes = vec![
        Node::new("dqx", "DequantizeLinear", &["xq", "xs", "xz"], &["xf"]),
        Node::new("dqw", "DequantizeLinear", &["w", "ws", "wz"], &["wf"])
            .with_attr("axis", AttrValue::Int(1)),
        Node::new("dqb", "DequantizeLinear", &["b", "bs", "bz"], &["bf"])
            .with_attr("axis", AttrValue::Int(0)),
        ct,
    ];
    let last = match cs.act_fn {
        None => "c",
        Some((0.0, f32::INFINITY)) => {
            nodes.push(Node::new("act", "Relu", &["c"], &["a"]));
            "a"
        }
        Some((lo, hi)) => {
            gr.initializers.insert("clo".into(), Tensor::scalar_f32(lo));
            gr.initializers.insert("chi".into(), Tensor::scalar_f32(hi));
            nodes.push(Node::new("act", "Clip", &["c", "clo", "chi"], &["a"]));
            "a"
        }
    };
    nodes.push(Node::new(
        "q",
        "QuantizeLinear",
        &[last, "ys", "yz"],
        &["yq"],
    ));
    gr.nodes = nodes;

    let opts = EngineOptions {
        requant: mode,
        ..Default::default()
    };
    let plan = compile(&gr, &opts).unwrap();
    let r = plan.report().iter().find(|r| r.node == "deconv").unwrap();
    assert!(
        matches!(r.placement, Placement::Integer { .. }),
        "{cs:?}: {:?}",
        r.placement
    );
    let n_in = xshape.iter().product();
    let xv: Vec<i32> = (0..n_in).map(|_| rng.int(xlo, xhi)).collect();
    let x = match cs.act {
        DType::U8 => Tensor::new(
            xshape.to_vec(),
            Data::U8(xv.iter().map(|&v| v as u8).collect()),
        ),
        _ => Tensor::new(
            xshape.to_vec(),
            Data::I8(xv.iter().map(|&v| v as i8).collect()),
        ),
    }
    .unwrap();
    let got = plan.run(vec![("xq", x.clone())]).unwrap().remove(0).1;

    // i64 reference (NCHW).
    let (pb, os) = geometry(cs);
    let [oh, ow] = os;
    let [h, w] = cs.hw;
    let mut acc = vec![0i64; cs.n * cs.c_out * oh * ow];
    for bi in 0..cs.n {
        for ci in 0..cs.c_in {
            let gi = ci / cig;
            for co in 0..cog {
                let oc = gi * cog + co;
                for ky in 0..kh {
                    for kx in 0..kw {
                        let wt = wv[((ci * cog + co) * kh + ky) * kw + kx] as i64 - wz_of(oc);
                        for iy in 0..h {
                            let oy =
                                (iy * cs.strides[0] + ky * cs.dilations[0]) as i64 - pb[0] as i64;
                            if oy < 0 || oy >= oh as i64 {
                                continue;
                            }
                            for ix in 0..w {
                                let ox = (ix * cs.strides[1] + kx * cs.dilations[1]) as i64
                                    - pb[1] as i64;
                                if ox < 0 || ox >= ow as i64 {
                                    continue;
                                }
                                let xq = xv[((bi * cs.c_in + ci) * h + iy) * w + ix] as i64
                                    - x_zp as i64;
                                acc[((bi * cs.c_out + oc) * oh + oy as usize) * ow
                                    + ox as usize] += xq * wt;
                            }
                        }
                    }
                }
            }
        }
    }
    let q = |v: f32| -> i32 {
        if v.is_infinite() {
            return if v > 0.0 { yhi } else { ylo };
        }
        ((v / y_s).round_ties_even() as i32 + y_zp).clamp(ylo, yhi)
    };
    let (lo, hi) = cs.act_fn.map_or((ylo, yhi), |(a, b)| (q(a), q(b)));
    let want: Vec<i64> = acc
        .iter()
        .enumerate()
        .map(|(i, &a)| {
            let oc = (i / (oh * ow)) % cs.c_out;
            let bias = if cs.bias { b[oc] as i64 } else { 0 };
            let v = match mode {
                RequantMode::Float => {
                    let scale = (x_s * ws_of(oc)) / y_s;
                    float_output_i64(a, bias, scale, y_zp, lo, hi)
                }
                RequantMode::FixedPoint => {
                    let m = QuantizedMultiplier::from_scales(x_s, ws_of(oc), y_s).unwrap();
                    let acc = i32::try_from(a + bias).unwrap();
                    (m.apply(acc, FixedPointRounding::DoubleRounding) + y_zp).clamp(lo, hi)
                }
            };
            v as i64
        })
        .collect();
    assert_eq!(got.shape, vec![cs.n, cs.c_out, oh, ow], "{cs:?}");
    assert_eq!(got.dtype, cs.out);
    let gv = got.to_i64_vec();
    let diff = gv.iter().zip(&want).filter(|(a, b)| a != b).count();
    assert_eq!(
        diff,
        0,
        "{cs:?} {mode:?}: {diff} of {} codes differ from the i64 reference",
        want.len()
    );
    let distinct: std::collections::BTreeSet<i64> = want.iter().copied().collect();
    assert!(
        distinct.len() >= 8,
        "{cs:?}: {} distinct codes: the case does not exercise the output range",
        distinct.len()
    );
    // The QDQ graph on the float executor: within one code (f32 accumulation order).
    if mode == RequantMode::Float {
        let fl = execute(&gr, vec![("xq".to_string(), x)])
            .unwrap()
            .remove(0)
            .1;
        assert_eq!(fl.shape, got.shape);
        let fv = fl.to_i64_vec();
        let worst = gv
            .iter()
            .zip(&fv)
            .map(|(a, b)| (a - b).abs())
            .max()
            .unwrap();
        assert!(worst <= 1, "{cs:?}: {worst} codes from the float executor");
    }
}

#[test]
fn deconv_2x2_stride_2_u8_per_channel_with_bias() {
    run_case(&Case::default());
}

#[test]
fn deconv_i8_codes_per_tensor_without_bias() {
    run_case(&Case {
        act: DType::I8,
        out: DType::I8,
        per_channel: false,
        bias: false,
        seed: 2,
        ..Case::default()
    });
    run_case(&Case {
        act: DType::I8,
        out: DType::U8,
        seed: 3,
        ..Case::default()
    });
}

#[test]
fn deconv_zero_points_at_range_ends() {
    for (xz, yz, seed) in [(0, 255, 4), (255, 0, 5)] {
        run_case(&Case {
            x_zp: Some(xz),
            y_zp: Some(yz),
            seed,
            ..Case::default()
        });
    }
}

#[test]
fn deconv_pads_output_padding_dilations() {
    run_case(&Case {
        k: [3, 3],
        strides: [2, 3],
        pads: Pads::Explicit([1, 0, 2, 1]),
        output_padding: [1, 2],
        seed: 6,
        ..Case::default()
    });
    run_case(&Case {
        k: [3, 2],
        strides: [1, 1],
        dilations: [2, 3],
        pads: Pads::Explicit([1, 2, 0, 1]),
        seed: 7,
        ..Case::default()
    });
}

#[test]
fn deconv_auto_pad_and_output_shape() {
    for (pads, seed) in [
        (Pads::SameUpper, 8),
        (Pads::SameLower, 9),
        (Pads::OutputShape([10, 13], false), 10),
        (Pads::OutputShape([9, 11], true), 11),
    ] {
        run_case(&Case {
            k: [3, 3],
            strides: [2, 2],
            pads,
            seed,
            ..Case::default()
        });
    }
}

#[test]
fn deconv_grouped_and_depthwise() {
    run_case(&Case {
        c_in: 6,
        c_out: 4,
        group: 2,
        k: [3, 3],
        strides: [2, 2],
        pads: Pads::Explicit([1, 1, 1, 1]),
        seed: 12,
        ..Case::default()
    });
    run_case(&Case {
        c_in: 5,
        c_out: 5,
        group: 5,
        per_channel: false,
        seed: 13,
        ..Case::default()
    });
    // Per-channel along axis 1 with groups: C_out/group scales shared by the groups.
    run_case(&Case {
        c_in: 6,
        c_out: 9,
        group: 3,
        seed: 14,
        ..Case::default()
    });
}

#[test]
fn deconv_fused_relu_and_clip() {
    run_case(&Case {
        act_fn: Some((0.0, f32::INFINITY)),
        seed: 15,
        ..Case::default()
    });
    run_case(&Case {
        act_fn: Some((-0.5, 1.5)),
        seed: 16,
        ..Case::default()
    });
}

#[test]
fn deconv_large_k_stresses_int32_accumulation() {
    // 300 input channels × 2×2 taps of ±255·±131 products.
    run_case(&Case {
        c_in: 300,
        c_out: 3,
        hw: [3, 3],
        n: 1,
        seed: 17,
        ..Case::default()
    });
}
