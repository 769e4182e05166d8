//! `quantkit qat --augment` and `--validation N [--keep-best]` on the committed LeNet and
//! 1,000-image sample: the teacher labels the augmented batch the student sees (an 8-bit
//! student distilled on strongly augmented inputs stays close to its teacher, which it
//! could not if the teacher saw the original images), the validation split is reported per
//! epoch and the kept epoch is the best one by it (the start included); bad options are
//! clear errors.

use std::path::PathBuf;

mod common;
use common::qat_lenet_sample as qat;

fn tmp(name: &str) -> PathBuf {
    common::tmp("qataug", name)
}

/// Distillation on strongly augmented inputs (4-pixel shifts, mirrors, scale jitter and
/// noise of 0.3 standard deviations): the W8A8 student's KL to its teacher stays that of
/// 8-bit quantization, so the teacher saw the same augmented batch. (Against the original
/// images' teacher the KL of LeNet's logits under such transforms is far above this.)
#[test]
fn augmented_distillation_with_validation_keeps_the_best_epoch() {
    let out = tmp("aug.onnx");
    let log = tmp("aug.csv");
    let (ok, stdout, err) = qat(&[
        "--distill",
        "--augment",
        "flip,shift=4,scale=0.15,noise=0.3,contrast=0.2",
        "--validation",
        "200",
        "--keep-best",
        "--epochs",
        "3",
        "--batch",
        "32",
        "--limit",
        "256",
        "--eval-limit",
        "200",
        "--lr",
        "1e-5",
        "-o",
        out.to_str().unwrap(),
        "--log",
        log.to_str().unwrap(),
        "--json",
    ]);
    assert!(ok, "{err}");
    let v: serde_json::Value = serde_json::from_str(stdout.trim()).expect("json");
    let kl = v["outputs"][0]["final_train_loss"].as_f64().unwrap();
    assert!(
        kl < 0.02,
        "the student is far from its teacher: KL {kl}: {stdout}"
    );
    assert_eq!(v["validation_samples"].as_u64(), Some(200), "{stdout}");
    let val: Vec<f64> = v["validation"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_f64().unwrap())
        .collect();
    assert_eq!(val.len(), 3, "{stdout}");
    assert!(v["validation_ptq"].as_f64().unwrap() > 0.9, "{stdout}");
    // The kept epoch is the best by validation, ties to the later one; the start (the
    // PTQ model the training began from, scored as exported) is candidate 0.
    let start = v["validation_start"].as_f64().unwrap();
    let scores: Vec<f64> = std::iter::once(start).chain(val.iter().cloned()).collect();
    let best = scores.iter().cloned().fold(f64::MIN, f64::max);
    let kept = scores.iter().rposition(|&s| s == best).unwrap();
    assert_eq!(v["kept_epoch"].as_u64(), Some(kept as u64), "{stdout}");
    assert_eq!(v["engine_agreement"].as_f64(), Some(1.0), "{stdout}");
    let csv = std::fs::read_to_string(&log).unwrap();
    assert!(
        csv.lines().next().unwrap().ends_with(",validation"),
        "{csv}"
    );
    assert_eq!(csv.lines().count(), 4, "{csv}");
    assert!(quantkit_graph::load_model(&out).is_ok());
    let _ = std::fs::remove_file(&out);
    let _ = std::fs::remove_file(&log);
}

/// A fine-tune that ruins the model (SGD at 0.5 on 256 images) scores far below its start
/// on the validation split every epoch, so `--keep-best` writes the start: epoch 0, whose
/// test figure on the engine is the PTQ model's.
#[test]
fn keep_best_writes_the_start_when_no_epoch_beats_it() {
    let out = tmp("start.onnx");
    let (ok, stdout, err) = qat(&[
        "--validation",
        "200",
        "--keep-best",
        "--epochs",
        "2",
        "--batch",
        "32",
        "--limit",
        "256",
        "--eval-limit",
        "200",
        "--optimizer",
        "sgd",
        "--lr",
        "0.5",
        "-o",
        out.to_str().unwrap(),
        "--json",
    ]);
    assert!(ok, "{err}");
    let v: serde_json::Value = serde_json::from_str(stdout.trim()).expect("json");
    let start = v["validation_start"].as_f64().unwrap();
    assert!(start > 0.8, "{stdout}");
    for e in v["validation"].as_array().unwrap() {
        assert!(
            e.as_f64().unwrap() < start,
            "an epoch scored as well as the start: {stdout}"
        );
    }
    assert_eq!(v["kept_epoch"].as_u64(), Some(0), "{stdout}");
    assert_eq!(v["engine_value"], v["ptq_value"], "{stdout}");
    assert_eq!(v["engine_agreement"].as_f64(), Some(1.0), "{stdout}");
    assert!(quantkit_graph::load_model(&out).is_ok());
    let _ = std::fs::remove_file(&out);
}

#[test]
fn bad_augment_and_validation_options_are_errors() {
    let out = tmp("bad.onnx");
    let o = out.to_str().unwrap();
    let (ok, _, err) = qat(&["--keep-best", "-o", o]);
    assert!(!ok && err.contains("--validation"), "{err}");
    let (ok, _, err) = qat(&["--validation", "1000", "-o", o]);
    assert!(
        !ok && err.contains("--validation 1000") && err.contains("fashion-mnist-sample"),
        "{err}"
    );
    let (ok, _, err) = qat(&["--augment", "rotate=10", "-o", o]);
    assert!(!ok && err.contains("rotate"), "{err}");
    // LeNet's input is [N, 1, 28, 28]: axis 1 is its channel axis, not a spatial one.
    let (ok, _, err) = qat(&["--augment", "flip=1", "--limit", "64", "-o", o]);
    assert!(!ok && err.contains("flip=1"), "{err}");
    assert!(!out.exists());
}

/// `--augment` with labels (cross-entropy, no `--distill`): the student trains on the
/// transformed batch with the labels as they are. Mirroring changes what is trained (a
/// different model and training loss), and the same mirror drawn with probability 0 is
/// the identity: a byte-identical model and the same loss as no augmentation, so the
/// labels path is untouched apart from the input.
#[test]
fn augmentation_with_labels_trains_on_the_transformed_batches() {
    let run = |name: &str, augment: Option<&str>| {
        let out = tmp(name);
        let log = out.with_extension("csv");
        let mut args = vec![
            "--epochs",
            "1",
            "--batch",
            "32",
            "--limit",
            "128",
            "--eval-limit",
            "100",
            "--lr",
            "1e-3",
            "--observer-steps",
            "0",
            "--json",
            "-o",
            out.to_str().unwrap(),
            "--log",
            log.to_str().unwrap(),
        ];
        if let Some(a) = augment {
            args.extend(["--augment", a]);
        }
        let (ok, stdout, err) = qat(&args);
        assert!(ok, "{err}");
        let v: serde_json::Value = serde_json::from_str(stdout.trim()).expect("json");
        let bytes = std::fs::read(&out).unwrap();
        // The epoch's training loss: the second column of the CSV's only data row.
        let csv = std::fs::read_to_string(&log).unwrap();
        let loss: f64 = csv
            .lines()
            .nth(1)
            .unwrap()
            .split(',')
            .nth(1)
            .unwrap()
            .parse()
            .unwrap();
        for f in [out.clone(), log.clone(), out.with_extension("svg")] {
            let _ = std::fs::remove_file(f);
        }
        (v, bytes, loss)
    };
    let (_, plain_model, plain_loss) = run("labels_plain.onnx", None);
    let (_, never_model, never_loss) = run("labels_p0.onnx", Some("flip,shift=2,p=0"));
    let (flip, flip_model, flip_loss) = run("labels_flip.onnx", Some("flip,shift=2"));
    assert!(never_model == plain_model, "p=0 must be the identity");
    assert_eq!(never_loss, plain_loss);
    assert!(
        flip_model != plain_model,
        "the mirrored batches were not trained on"
    );
    assert_ne!(flip_loss, plain_loss);
    // Labels kept: the mirrored and shifted clothes are still mostly classified right.
    assert!(flip["qat_value"].as_f64().unwrap() > 0.8, "{flip}");
}

/// With `--json` (or stderr not a terminal) `qat` writes plain progress lines on stderr,
/// each `qat: H:MM:SS ...`: the start and every epoch's figures; `-q` silences them, and
/// stdout is the JSON either way.
#[test]
fn progress_lines_on_stderr_and_quiet() {
    let out = tmp("lines.onnx");
    let o = out.to_str().unwrap();
    let args = [
        "--epochs",
        "2",
        "--batch",
        "32",
        "--limit",
        "64",
        "--eval-limit",
        "64",
        "-o",
        o,
        "--json",
    ];
    let (ok, stdout, err) = qat(&args);
    assert!(ok, "{err}");
    assert!(serde_json::from_str::<serde_json::Value>(stdout.trim()).is_ok());
    let lines: Vec<&str> = err.lines().collect();
    assert!(
        lines.iter().all(|l| l.starts_with("qat: ")),
        "a stderr line without the prefix: {err}"
    );
    assert!(lines[0].contains("training: 2 epochs of 2 steps"), "{err}");
    for e in ["epoch 1: loss", "epoch 2: loss"] {
        assert!(lines.iter().any(|l| l.contains(e)), "no `{e}` line: {err}");
    }
    let quiet: Vec<&str> = args.iter().copied().chain(["-q"]).collect();
    let (ok, stdout, err) = qat(&quiet);
    assert!(ok, "{err}");
    assert!(err.is_empty(), "-q wrote on stderr: {err}");
    assert!(serde_json::from_str::<serde_json::Value>(stdout.trim()).is_ok());
    let _ = std::fs::remove_file(&out);
}

/// The validation split is drawn with `--validation-seed`, not `--seed`: two runs with other
/// shuffling hold out the same samples (the PTQ start scores the same on them), so a model
/// trained with `quantkit train --validation N` can be fine-tuned with any `--seed`.
#[test]
fn the_validation_split_does_not_move_with_the_shuffling_seed() {
    let out = tmp("vseed.onnx");
    let run = |extra: &[&str]| {
        let mut args = vec![
            "--validation",
            "300",
            "--epochs",
            "1",
            "--batch",
            "32",
            "--limit",
            "64",
            "--eval-limit",
            "32",
            "-o",
            out.to_str().unwrap(),
            "--json",
            "-q",
        ];
        args.extend_from_slice(extra);
        let (ok, stdout, err) = qat(&args);
        assert!(ok, "{err}");
        let v: serde_json::Value = serde_json::from_str(stdout.trim()).expect("json");
        v["validation_ptq"].as_f64().unwrap()
    };
    let a = run(&["--seed", "0"]);
    let b = run(&["--seed", "5"]);
    assert_eq!(a, b, "the split moved with --seed");
    let _ = std::fs::remove_file(&out);
}
