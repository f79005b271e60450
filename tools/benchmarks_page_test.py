#!/usr/bin/python3
"""tools/benchmarks_page.py on a results folder in the formats the
benchmark binaries write (tools/bench_fixtures.py): every table appears
with the figures of the files (the PyTorch section's without and under
MPS side by side), parts without files say so, and input that is not a
result fails naming the file.

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

    def write_pytorch(self, mps=True):
        """lora_step.py's and native_speed.py's files, without MPS and
        (mps) under it."""
        self.write("lora_step.json", bench_fixtures.lora_step())
        self.write("native_speed.json", bench_fixtures.native_speed())
        self.write("many_processes.json", bench_fixtures.many_processes())
        if mps:
            self.write("many_processes_mps.json",
                       bench_fixtures.many_processes(scale=0.25))
            self.write("lora_step_mps.json", bench_fixtures.lora_step(
                mps_client=True, side_ms={
                    "local": 20.0, "daemon": 30.0, "lists": 16.0,
                    "local_unsloth": 19.0, "local_lists": 15.0}))
            self.write("native_speed_mps.json",
                       bench_fixtures.native_speed(scale=0.5))

    def pytorch_part(self, page):
        start = page.index("## PyTorch: the LoRA step, per call and eight "
                           "processes, with and without MPS")
        return page[start:page.index("## The dashboard against")]

    def test_pytorch_section_sets_mps_beside_without(self):
        self.write_full_run()
        self.write_pytorch()
        result = self.generate()
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertNotIn("lora_step", result.stderr)
        self.assertNotIn("native_speed", result.stderr)
        page = self.read_page()
        part = self.pytorch_part(page)
        self.assertLess(page.index("## The service under load"),
                        page.index("## PyTorch:"))
        self.assertNotIn("Not measured", part)
        self.assertIn("From `lora_step.json` and `lora_step_mps.json`.", part)
        self.assertIn("NVIDIA H100 80GB HBM3, torch 2.5.1+cu124; 5120 "
                      "tokens, hidden 2048, intermediate 11008, rank 16; "
                      "median (min..max) of 3 runs of 30 timed steps after "
                      "10 warm-up steps", part)
        self.assertIn("Requests (hand-offs) per step: daemon 20, lists 4.",
                      part)
        # Targets from each file (issue 46), met or not by the median.
        self.assertIn("without MPS >= 0.70 (median 0.800: met); under MPS "
                      ">= 1.10 (median 1.250: met)", part)
        self.assertIn("without MPS no, under MPS yes", part)
        # Rows in the page's order, step ms and local / side, without MPS
        # then under it.
        self.assertIn("| side | step ms, without MPS | local / side, "
                      "without MPS | step ms, under MPS | local / side, "
                      "under MPS |", part)
        self.assertIn("| local (F.linear, PEFT-style) | 20.00 (19.80..20.20) "
                      "| - | 20.00 (19.80..20.20) | - |", part)
        self.assertIn("| lists (LoraLinear, product lists) | 25.00 "
                      "(24.75..25.25) | 0.80 (0.80..0.80) | 16.00 "
                      "(15.84..16.16) | 1.25 (1.25..1.25) |", part)
        rows = [line.split(" (")[0] for line in part.splitlines()
                if line.startswith("| local") or line.startswith("| daemon")
                or line.startswith("| lists")]
        self.assertEqual(rows, ["| local", "| local_unsloth",
                                "| local_lists", "| daemon", "| lists"])
        # native_speed: per call for the two small shapes only, then the
        # eight processes, each without MPS then under it.
        self.assertIn("| 256x256x256 | 30.0 (27.0..33.0) | 20.0 (18.0..22.0) "
                      "| 15.0 (13.5..16.5) | 20.0 (18.0..22.0) |", part)
        self.assertIn("| 16x4096x4096 | 31.0 (27.9..34.1) |", part)
        self.assertNotIn("5120x11008x2048", part)
        self.assertIn("over 200 calls", part)
        self.assertIn("8 processes, 16x4096x4096 NT, 1000 products each", part)
        self.assertIn("| each product waited for | 20,000 (18,000..22,000) | "
                      "8,000 (7,200..8,800) | 2.50 (2.50..2.50) | 10,000 "
                      "(9,000..11,000) | 8,000 (7,200..8,800) | "
                      "1.25 (1.25..1.25) |", part)
        self.assertIn("| stream-ordered, waited for at the end | 30,000", part)
        for name in ("lora_step.json", "lora_step_mps.json",
                     "native_speed.json", "native_speed_mps.json",
                     "many_processes.json", "many_processes_mps.json"):
            self.assertIn(f"[`{name}`](bench/{name})", page)
        # --check as before: current, then stale when a file changes.
        self.assertEqual(self.generate("--check").returncode, 0)
        self.write("lora_step_mps.json", bench_fixtures.lora_step(
            mps_client=True))
        stale = self.generate("--check")
        self.assertEqual(stale.returncode, 1)
        self.assertIn("run tools/benchmarks_page.py", stale.stderr)

    def test_pytorch_files_absent_are_named(self):
        self.write_full_run()
        result = self.generate()
        self.assertEqual(result.returncode, 0, result.stderr)
        part = self.pytorch_part(self.read_page())
        self.assertIn("Not measured in this run (no `lora_step.json`, no "
                      "`lora_step_mps.json`).", part)
        self.assertIn("Not measured in this run (no `native_speed.json`, no "
                      "`native_speed_mps.json`).", part)
        self.assertIn("Not measured in this run (no `many_processes.json`, "
                      "no `many_processes_mps.json`).", part)
        self.assertNotIn("| side |", part)
        self.assertIn("lora_step_mps.json: not on the PyTorch section",
                      result.stderr)
        self.assertEqual(self.generate("--check").returncode, 0)
        # Without MPS only: its columns filled, the MPS ones "-", the
        # missing files named.
        self.write_pytorch(mps=False)
        result = self.generate()
        self.assertEqual(result.returncode, 0, result.stderr)
        part = self.pytorch_part(self.read_page())
        self.assertIn("Not measured under MPS in this run (no "
                      "`lora_step_mps.json`).", part)
        self.assertIn("Not measured under MPS in this run (no "
                      "`native_speed_mps.json`).", part)
        self.assertIn("| daemon (a request per product) | 40.00 "
                      "(39.60..40.40) | 0.50 (0.50..0.50) | - | - |", part)
        self.assertIn("| 256x256x256 | 30.0 (27.0..33.0) | 20.0 (18.0..22.0) "
                      "| - | - |", part)
        self.assertIn("| - | - | - |", part)
        # A run without the eight processes (--processes=0).
        self.write("native_speed.json",
                   bench_fixtures.native_speed(processes=False))
        result = self.generate()
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertIn("No eight-process figures in these files.",
                      self.pytorch_part(self.read_page()))

    def test_many_processes_set_mps_beside_without(self):
        self.write_full_run()
        self.write("many_processes.json", bench_fixtures.many_processes())
        result = self.generate()
        self.assertEqual(result.returncode, 0, result.stderr)
        part = self.pytorch_part(self.read_page())
        self.assertIn("Not measured under MPS in this run (no "
                      "`many_processes_mps.json`).", part)
        self.assertIn("| distinct | 8 | 80,000 (72,000..88,000) | 40,000 "
                      "(36,000..44,000) | 2.00 (2.00..2.00) | - | - | - |",
                      part)
        self.write("many_processes_mps.json",
                   bench_fixtures.many_processes(scale=0.25))
        result = self.generate()
        self.assertEqual(result.returncode, 0, result.stderr)
        part = self.pytorch_part(self.read_page())
        self.assertIn("From `many_processes.json` and "
                      "`many_processes_mps.json`.", part)
        self.assertIn("300 products per process per run; median (min..max) "
                      "of 3 runs", part)
        self.assertIn("| shared | 1 | 10,000 (9,000..11,000) | 5,000 "
                      "(4,500..5,500) | 2.00 (2.00..2.00) | 2,500 "
                      "(2,250..2,750) | 5,000 (4,500..5,500) | 0.50 "
                      "(0.50..0.50) |", part)
        rows = [line.split(" |")[0] + line.split(" |")[1] for line in
                part.splitlines() if line.startswith(("| distinct",
                                                      "| shared",
                                                      "| adapter"))]
        self.assertEqual(rows, ["| distinct 1", "| distinct 8",
                                "| shared 1", "| shared 8",
                                "| adapter 1", "| adapter 8"])
        self.assertNotIn("Where the daemon's launches went", part)
        # With the daemon's metrics: where its launches went, at 8.
        self.write("many_processes_mps.json",
                   bench_fixtures.many_processes(scale=0.25, launches=True))
        result = self.generate()
        self.assertEqual(result.returncode, 0, result.stderr)
        part = self.pytorch_part(self.read_page())
        self.assertIn("| under MPS | distinct | 8 | 1.50 | 800.0 | slot "
                      "480.0, kernel 25.0, signal 5.0 | 400.0 | 0.75 | 4.50 "
                      "| 15.5 / 8.0 |", part)
        self.assertNotIn("| under MPS | distinct | 1 |", part)
        report = bench_fixtures.many_processes(launches=True)
        del report["cases"][1]["daemon_launches"]["worker_us"]
        self.write("many_processes.json", report)
        result = self.generate()
        self.assertEqual(result.returncode, 1)
        self.assertIn('many_processes.json: cases[1] daemon_launches: no '
                      '"worker_us"', result.stderr)
        report = bench_fixtures.many_processes()
        del report["cases"][2]["ratio"]
        self.write("many_processes.json", report)
        result = self.generate()
        self.assertEqual(result.returncode, 1)
        self.assertIn('many_processes.json: cases[2]: no "ratio"',
                      result.stderr)

    def test_bad_pytorch_input_names_the_file_and_field(self):
        report = bench_fixtures.lora_step()
        del report["step"]["sides"]["lists"]["ratio_local_over"]["median"]
        self.write("lora_step.json", report)
        result = self.generate()
        self.assertEqual(result.returncode, 1)
        self.assertIn('lora_step.json: step sides lists ratio_local_over: '
                      'no "median"', result.stderr)
        self.write("lora_step.json", bench_fixtures.lora_step())
        report = bench_fixtures.native_speed()
        report["per_call"][1]["torch_us"] = 20
        self.write("native_speed_mps.json", report)
        result = self.generate()
        self.assertEqual(result.returncode, 1)
        self.assertIn('native_speed_mps.json: per_call[1]: "torch_us" is not '
                      'a dict', result.stderr)

    def test_help(self):
        result = subprocess.run([sys.executable, PAGE, "--help"],
                                capture_output=True, text=True, timeout=60)
        self.assertEqual(result.returncode, 0)
        self.assertIn("--check", result.stdout)


if __name__ == "__main__":
    unittest.main()
