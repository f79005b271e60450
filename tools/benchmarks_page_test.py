#!/usr/bin/python3
"""tools/benchmarks_page.py on a results folder in the formats the
benchmark binaries write (tools/bench_fixtures.py): every table appears
with the figures of the files, parts without files say so, and input that
is not a result fails naming the file.

Usage: /usr/bin/python3 tools/benchmarks_page_test.py
"""
import json
import os
import subprocess
import sys
import tempfile
import unittest

import bench_fixtures

HERE = os.path.dirname(os.path.abspath(__file__))
PAGE = os.path.join(HERE, "benchmarks_page.py")


class BenchmarksPageTest(unittest.TestCase):
    def setUp(self):
        tmp = tempfile.TemporaryDirectory()
        self.addCleanup(tmp.cleanup)
        self.docs = tmp.name
        self.bench = os.path.join(self.docs, "bench")
        self.dashboard = os.path.join(self.docs, "dashboard")
        os.makedirs(self.bench)
        os.makedirs(self.dashboard)
        self.page = os.path.join(self.docs, "benchmarks.md")

    def write(self, name, content):
        path = os.path.join(self.bench, name)
        with open(path, "w", encoding="utf-8") as f:
            f.write(content if isinstance(content, str)
                    else json.dumps(content))
        return path

    def generate(self, *extra):
        return subprocess.run(
            [sys.executable, PAGE, "--bench-dir", self.bench,
             "--dashboard-dir", self.dashboard, "--output", self.page,
             *extra], capture_output=True, text=True, timeout=60)

    def read_page(self):
        with open(self.page, encoding="utf-8") as f:
            return f.read()

    def write_full_run(self, runs=1):
        self.write("run_info.json", {
            "commit": "0123abc", "date": "2026-12-01T10:00Z",
            "gpu": "NVIDIA H200, 570.00, 143771 MiB", "host_cpus": 16,
            "commands": ["bundle/matmul-bench --sustained_s=1 --json=x"]})
        self.write("matmul_bench.json", bench_fixtures.matmul_bench(runs))
        self.write("service_1_on.json", bench_fixtures.cli_bench_run(
            "batching on", 1.0, mode="ipc rings 4", levels=(1, 16, 64)))
        self.write("service_2_small.json", bench_fixtures.cli_bench_run(
            "one ring", 0.5, shape="256x256x256:NT", levels=(1,)))

    def test_full_run_gives_every_table(self):
        self.write_full_run()
        self.write("dashboard_vs_bench.txt",
                   "shape 5120x11008x2048; dashboard expression (40 points)\n"
                   "| figure | kernel | TFLOPS |\n|---|---|---|\n"
                   "| dashboard, median over the load | cublaslt_algo2 | 1 |\n"
                   "PASS\n")
        with open(os.path.join(self.dashboard, "dashboard.png"), "wb") as f:
            f.write(b"\x89PNG\r\n\x1a\n")
        result = self.generate()
        self.assertEqual(result.returncode, 0, result.stderr)
        page = self.read_page()
        self.assertIn("measured at commit `0123abc`", page)
        self.assertIn("NVIDIA H200", page)
        self.assertIn("No GB10 (DGX Spark) has been available", page)
        # Kernel table: pick, cuBLASLt, ratio, fastest own kernel (of the
        # family bests), GB10-fitting kernel.
        self.assertIn("| 5120x11008x2048 | NT | `cublaslt_algo0` | 700 | "
                      "`cublaslt_algo0` | 700 | 1.00 | "
                      "`wgmma_128x256x64_s4` | 600 | 0.86 | "
                      "`mma_128x128x64_s2_w2x2_tma` | 400 | 0.57 |", page)
        self.assertIn("| 5120x512x2048 | NN |", page)
        # Sustained: back to back 630 = 0.90 of the table's 700.
        self.assertIn("## Sustained runs", page)
        self.assertIn("1 s per phase", page)
        self.assertIn("| 5120x11008x2048 | NN | spark | "
                      "`mma_128x128x64_s2_w2x2_tma` | 400 | 360 (0.90) | "
                      "0.57 |", page)
        # Service tables, in file order, with each level.
        self.assertIn("### batching on: 16x4096x4096:NT, ipc rings 4", page)
        self.assertIn("| 64 | 64,000 | 32.0 | 6.400 | 12.800 | 32.0 | 20.0 | "
                      "60.0 / 90.0 | `cublaslt_algo0` |", page)
        self.assertLess(page.index("### batching on"),
                        page.index("### one ring"))
        # The dashboard check: its table kept whole, the picture linked.
        self.assertIn("| figure | kernel | TFLOPS |\n|---|---|---|\n"
                      "| dashboard, median", page)
        self.assertIn("](dashboard/dashboard.png)", page)
        self.assertIn("[`service_2_small.json`](bench/service_2_small.json)",
                      page)
        # The page is what the files give; a changed file makes it stale.
        self.assertEqual(self.generate("--check").returncode, 0)
        self.write("service_2_small.json", bench_fixtures.cli_bench_run(
            "one ring", 0.75, shape="256x256x256:NT", levels=(1,)))
        stale = self.generate("--check")
        self.assertEqual(stale.returncode, 1)
        self.assertIn("run tools/benchmarks_page.py", stale.stderr)

    def test_several_runs_give_the_spread(self):
        self.write_full_run(runs=3)
        result = self.generate()
        self.assertEqual(result.returncode, 0, result.stderr)
        page = self.read_page()
        self.assertIn("the table is the last of 3 runs", page)
        # pick / cuBLASLt is 1.000 in every run; spark 400/700, 410/701,
        # 420/702.
        self.assertIn("| 5120x11008x2048 | NN | 1.000 [1.000, 1.000] | "
                      "0.585 [0.571, 0.598] |", page)

    def test_missing_parts_are_named(self):
        result = self.generate()
        self.assertEqual(result.returncode, 0, result.stderr)
        page = self.read_page()
        self.assertIn("Not measured in this run (no `matmul_bench.json`)",
                      page)
        self.assertIn("Not measured in this run (no `service_*.json`)", page)
        self.assertIn("the commit measured is not recorded", page)
        self.assertIn("no kernel table", result.stderr)
        self.assertNotIn("| shape | layout |", page)

    def test_left_over_files_are_reported(self):
        self.write_full_run()
        self.write("m16_0.json", "{}")
        result = self.generate()
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertIn("m16_0.json is not part of the page", result.stderr)

    def test_bad_input_fails_naming_the_file_and_field(self):
        self.write_full_run()
        self.write("service_3_bad.json", '{"label": ')
        result = self.generate()
        self.assertEqual(result.returncode, 1)
        self.assertIn("service_3_bad.json: not JSON", result.stderr)
        run = bench_fixtures.cli_bench_run("x", 1.0)
        del run["levels"][0]["latency_p99_s"]
        self.write("service_3_bad.json", run)
        result = self.generate()
        self.assertEqual(result.returncode, 1)
        self.assertIn('service_3_bad.json: levels[0]: no "latency_p99_s"',
                      result.stderr)
        os.remove(os.path.join(self.bench, "service_3_bad.json"))
        bench = bench_fixtures.matmul_bench()
        bench["runs"][0][1]["pick"]["tflops"] = "fast"
        self.write("matmul_bench.json", bench)
        result = self.generate()
        self.assertEqual(result.returncode, 1)
        self.assertIn('matmul_bench.json: runs[0][1] pick: "tflops" is not '
                      'a float', result.stderr)

    def test_help(self):
        result = subprocess.run([sys.executable, PAGE, "--help"],
                                capture_output=True, text=True, timeout=60)
        self.assertEqual(result.returncode, 0)
        self.assertIn("--check", result.stdout)


if __name__ == "__main__":
    unittest.main()
