"""``udcg report``'s HTML opened in a real browser: headless Chromium renders report.html to a
PNG, and the plot areas (the panels' light grey backgrounds, found in the picture) hold drawn
marks: coloured points and bars, not a blank or unrendered area. Skips where Chromium (Debian's
``chromium`` package) or matplotlib (to read the PNG) is absent."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

from tests.e2e.test_one_command import TOPICS, report, write_data

#: The plot panels' background, #f7f7f7 (udcg.pipeline.journey_report).
PANEL = 0xF7 / 255


def browser() -> str:
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    if found is None:
        pytest.skip("chromium not installed (Debian: apt-get install chromium)")
    return found


def screenshot(chromium: str, page: Path, png: Path, profile: Path) -> None:
    """``page`` rendered by headless Chromium into ``png`` (1200 x 2000 pixels)."""
    done = subprocess.run(
        [
            chromium, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
            f"--user-data-dir={profile}", f"--screenshot={png}", "--window-size=1200,2000",
            page.resolve().as_uri(),
        ],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0 and png.exists(), done.stderr[-2000:]


def bands(rows: np.ndarray, gap: int = 4) -> list[tuple[int, int]]:
    """Runs of True rows as ``(first, last + 1)``, runs less than ``gap`` rows apart joined
    (a grid line crosses a panel's background)."""
    edges = np.flatnonzero(np.diff(np.concatenate([[0], rows.astype(int), [0]])))
    runs: list[tuple[int, int]] = []
    for first, end in zip(edges[::2].tolist(), edges[1::2].tolist(), strict=True):
        if runs and first - runs[-1][1] < gap:
            runs[-1] = (runs[-1][0], end)
        else:
            runs.append((first, end))
    return runs


def plot_areas(image: np.ndarray) -> list[np.ndarray]:
    """The picture's plot areas: each band of rows where panel background fills at least 100
    pixels, cut to the columns where that background occurs."""
    background = (np.abs(image[..., :3] - PANEL) < 0.006).all(axis=-1)
    areas = []
    for top, bottom in bands(background.sum(axis=1) >= 100):
        columns = np.flatnonzero(background[top:bottom].any(axis=0))
        areas.append(image[top:bottom, columns[0] : columns[-1] + 1, :3])
    return areas


def test_report_renders_with_visible_plots(tmp_path: Path) -> None:
    chromium = browser()
    image_module = pytest.importorskip("matplotlib.image", reason="matplotlib reads the PNG")
    data = write_data(tmp_path / "data")
    probs = data / "probs.jsonl"
    probs.write_text(
        "".join(
            json.dumps({"question": q, "passage": t, "abstain_prob": 0.9 - 0.1 * (len(t) % 7)})
            + "\n"
            for _, q, _ in TOPICS
            for t in (line.split("\t", 1)[1] for line in
                      (data / "collection.tsv").read_text().splitlines())
        )
    )  # fmt: skip
    out = tmp_path / "out"
    found, _ = report(data, out, f"precomputed:{probs}", tmp_path / "judge.sqlite")
    png = tmp_path / "report.png"
    screenshot(chromium, out / "report.html", png, tmp_path / "profile")
    image = image_module.imread(png)
    assert image.shape[:2] == (2000, 1200)

    areas = plot_areas(image)
    # the means and the differences: at least one row of panels each
    assert len(areas) >= 2, [a.shape for a in areas]
    for area in areas:
        assert area.shape[0] > 100 and area.shape[1] > 150, area.shape
        assert area.std() > 0.05  # lines, labels and marks, not a flat fill
        colour = area.max(axis=-1) - area.min(axis=-1)
        assert (colour > 0.3).sum() > 200  # the systems' coloured points and bars
    # A page whose plots are missing fails the same check: the table and text alone have no
    # panel background.
    blank = out / "blank.html"
    text = (out / "report.html").read_text()
    blank.write_text(text[: text.index("<h2>")] + "</body></html>\n")
    screenshot(chromium, blank, tmp_path / "blank.png", tmp_path / "profile")
    assert plot_areas(image_module.imread(tmp_path / "blank.png")) == []
    assert len(found["comparison"]["measures"]) == 5
