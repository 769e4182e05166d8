#!/usr/bin/env python3
"""More text lines for PP-OCRv4's recognizer (issue 18: `--target agreement=0.99` needs at
least 268 held-out lines, and the shared ppocr-cls fixture has 64 upright ones).

Lines are drawn exactly as the shared fixture's (`../shared/models/make_fixtures.py`:
`render_line`, the same word list and mix of case, digits, font sizes 20-32, margins and
ink; DejaVuSans), upright only, with another seed, and no text repeated from the fixture
(`cls_texts.json`). Each is preprocessed by RapidOCR 1.4.4's `resize_norm_img` at 48x192
(`cls_resize_norm` in make_fixtures.py: the recognizer's `TextRecognizer.resize_norm_img`
with imgW = 192 is the same code), float32 [N, 3, 48, 192].

    python3 bench/rec_lines.py OUT_DIR [--shared ../shared] [--calib 1600] [--test 500] [--seed 2026]

writes OUT_DIR/calib.npy (the first --calib lines), OUT_DIR/test.npy (the next --test lines,
for reporting only) and OUT_DIR/texts.json. Needs numpy, Pillow and opencv-python-headless
(make_fixtures.py's imports) and the font at /usr/share/fonts/truetype/dejavu/DejaVuSans.ttf
(Debian fonts-dejavu-core).
"""
import argparse
import importlib.util
import json
import os

import numpy as np

FONT = "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf"


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out")
    ap.add_argument("--shared", default=os.path.join(os.path.dirname(__file__), "../../shared"))
    ap.add_argument("--calib", type=int, default=1600)
    ap.add_argument("--test", type=int, default=500)
    ap.add_argument("--seed", type=int, default=2026)
    a = ap.parse_args()
    models = os.path.join(a.shared, "models")
    spec = importlib.util.spec_from_file_location("make_fixtures", os.path.join(models, "make_fixtures.py"))
    mf = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mf)
    from PIL import ImageFont

    old = {m["text"] for m in json.load(open(os.path.join(models, "ppocr-cls/cls_texts.json")))}
    rng = np.random.default_rng(a.seed)
    fonts, seen, items = {}, set(old), []
    n = a.calib + a.test
    while len(items) < n:  # the fixture's draw (make_fixtures.build_cls), upright only
        ws = [mf.WORDS[i] for i in rng.integers(0, len(mf.WORDS), int(rng.integers(1, 4)))]
        r = rng.random()
        if r < 0.2:
            ws = [w.capitalize() for w in ws]
        elif r < 0.3:
            ws = [w.upper() for w in ws]
        elif r < 0.5:
            ws[0] = ws[0].capitalize()
        if rng.random() < 0.2:
            ws.append(str(int(rng.integers(0, 10000))))
        text = " ".join(ws)
        size = int(rng.integers(20, 33))
        mx, my, ink = int(rng.integers(2, 9)), int(rng.integers(2, 6)), int(rng.integers(0, 61))
        if text in seen:
            continue
        left, top, right, bottom = fonts.setdefault(size, ImageFont.truetype(FONT, size)).getbbox(text)
        if right - left + 2 * mx < 3 * (bottom - top + 2 * my):
            continue
        seen.add(text)
        items.append((text, size, mx, my, ink))
    x = np.stack([mf.cls_resize_norm(mf.render_line(t, fonts[s], mx, my, ink))
                  for t, s, mx, my, ink in items]).astype(np.float32)
    os.makedirs(a.out, exist_ok=True)
    np.save(os.path.join(a.out, "calib.npy"), x[:a.calib])
    np.save(os.path.join(a.out, "test.npy"), x[a.calib:])
    json.dump([{"text": t, "font_px": s} for t, s, *_ in items], open(os.path.join(a.out, "texts.json"), "w"), indent=0)
    print(f"{a.out}: calib {a.calib}, test {a.test} lines, {x.shape[1:]}")


if __name__ == "__main__":
    main()
