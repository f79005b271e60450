#!/usr/bin/python3
"""tools/plot_bench.py on runs in matmul-cli bench's JSON format: a chart
with both runs' colours in it, and a clear failure on input that is not
such a run.

Usage: /usr/bin/python3 tools/plot_bench_test.py
(client/cli/cli_end_to_end_test.sh charts a real `matmul-cli bench --save`.)
"""
import json
import os
import struct
import subprocess
import sys
import tempfile
import unittest

from bench_fixtures import cli_bench_run as bench_run

HERE = os.path.dirname(os.path.abspath(__file__))
PLOT = os.path.join(HERE, "plot_bench.py")


def run_plot(*args):
    return subprocess.run([sys.executable, PLOT, *args], capture_output=True,
                          text=True, timeout=120)


def png_size(path):
    with open(path, "rb") as f:
        head = f.read(24)
    if head[:8] != b"\x89PNG\r\n\x1a\n":
        return None
    return struct.unpack(">II", head[16:24])


def has_colour(path, rgb):
    """Whether some pixel of the PNG is within a few levels of rgb."""
    import matplotlib.image
    pixels = matplotlib.image.imread(path)[:, :, :3]
    want = [((rgb >> s) & 0xff) / 255.0 for s in (16, 8, 0)]
    close = abs(pixels - want).max(axis=2) < 0.02
    return bool(close.any())


class PlotBenchTest(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.TemporaryDirectory()
        self.addCleanup(self.dir.cleanup)

    def path(self, name):
        return os.path.join(self.dir.name, name)

    def write(self, name, content):
        with open(self.path(name), "w", encoding="utf-8") as f:
            f.write(content if isinstance(content, str)
                    else json.dumps(content))
        return self.path(name)

    def test_two_runs_make_a_chart_with_both_colours(self):
        off = self.write("off.json", bench_run("batching off", 0.25))
        on = self.write("on.json", bench_run("batching on", 1.0))
        result = run_plot(off, on, "-o", self.path("chart.png"))
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertEqual(png_size(self.path("chart.png")), (960, 600))
        self.assertTrue(has_colour(self.path("chart.png"), 0x1f77b4))
        self.assertTrue(has_colour(self.path("chart.png"), 0xd62728))
        # One run: the second colour must not appear.
        result = run_plot(off, "-o", self.path("one.png"))
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertFalse(has_colour(self.path("one.png"), 0xd62728))

    def test_malformed_json_fails_naming_the_file(self):
        bad = self.write("bad.json", '{"label": "x", "levels": [')
        result = run_plot(bad, "-o", self.path("bad.png"))
        self.assertEqual(result.returncode, 1)
        self.assertIn("bad.json: not JSON", result.stderr)
        self.assertFalse(os.path.exists(self.path("bad.png")))

    def test_other_json_fails_saying_what_is_missing(self):
        run = bench_run("x", 1.0)
        del run["levels"][1]["latency_p99_s"]
        partial = self.write("partial.json", run)
        result = run_plot(partial, "-o", self.path("p.png"))
        self.assertEqual(result.returncode, 1)
        self.assertIn('level 1: "latency_p99_s" is missing', result.stderr)
        other = self.write("other.json", {"runs": []})
        result = run_plot(other, "-o", self.path("o.png"))
        self.assertEqual(result.returncode, 1)
        self.assertIn("not a matmul-cli bench result", result.stderr)
        result = run_plot(self.path("absent.json"), "-o", self.path("a.png"))
        self.assertEqual(result.returncode, 1)
        self.assertIn("cannot read", result.stderr)

    def test_unwritable_output_fails(self):
        run = self.write("run.json", bench_run("x", 1.0))
        result = run_plot(run, "-o", self.path("no/such/dir/chart.png"))
        self.assertEqual(result.returncode, 1)
        self.assertIn("cannot write", result.stderr)

    def test_help_and_usage(self):
        result = run_plot("--help")
        self.assertEqual(result.returncode, 0)
        self.assertIn("p99 (solid)", result.stdout)
        self.assertNotEqual(run_plot().returncode, 0)  # no input, no -o


if __name__ == "__main__":
    unittest.main()
