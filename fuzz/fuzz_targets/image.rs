//! Any bytes as an image file in an image folder (PNG or JPEG, format guessed from the
//! content as the reader does): listing, the size probe, decoding under the `image_pixels`
//! limit, conversion, resizing and normalisation return a sample or an error. Read twice:
//! at its own size in gray NCHW, and resized to 7 × 5 in RGB NHWC.
#![no_main]
use libfuzzer_sys::fuzz_target;
use quantkit_data::image_folder::ImageFolder;
use quantkit_data::{ColorMode, Dataset, ImageOptions, Layout};

fuzz_target!(|data: &[u8]| {
    quantkit_fuzz::install_limits();
    let dir = quantkit_fuzz::scratch_dir().join("images");
    if std::fs::create_dir_all(&dir).is_err() {
        return;
    }
    // The reader lists by extension and then guesses the format from the bytes.
    let ext = if data.starts_with(&[0xff, 0xd8]) {
        "jpg"
    } else {
        "png"
    };
    let _ = std::fs::remove_file(dir.join("a.png"));
    let _ = std::fs::remove_file(dir.join("a.jpg"));
    if std::fs::write(dir.join(format!("a.{ext}")), data).is_err() {
        return;
    }
    let resized = ImageOptions {
        size: Some((7, 5)),
        layout: Layout::Nhwc,
        color: ColorMode::Rgb,
        mean: vec![0.5, 0.4, 0.3],
        std: vec![0.2],
        ..ImageOptions::default()
    };
    for opts in [ImageOptions::default(), resized] {
        if let Ok(mut folder) = ImageFolder::open(&dir, &opts) {
            let mut out = Vec::new();
            if folder.read_sample(0, &mut out).is_ok() {
                let want: usize = folder.sample_shape().iter().product();
                assert_eq!(out.len(), want, "sample size differs from sample_shape");
            }
        }
    }
});
