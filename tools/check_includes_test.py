#!/usr/bin/python3
"""Tests of check_includes.py on small made-up trees: each rule is broken
once and must be reported, and a tree that keeps the rules passes.

Usage: tools/check_includes_test.py
"""

import contextlib
import io
import os
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import check_includes  # noqa: E402


def make_tree(root, files, readme=None):
    """files: {path: [included paths]}; readme: README.md's text (a map
    naming one file of the tree when None)."""
    with open(os.path.join(root, "README.md"), "w", encoding="utf-8") as out:
        out.write(readme if readme is not None else
                  "# x\n\n## Map of a request\n\n`common/a.h`, `server/`\n")
    for path, included in files.items():
        full = os.path.join(root, path)
        os.makedirs(os.path.dirname(full), exist_ok=True)
        with open(full, "w", encoding="utf-8") as out:
            out.write("#include <vector>\n")
            for target in included:
                out.write(f'#include "{target}"\n')


GOOD_TREE = {
    "common/a.h": [],
    "common/gemm/g.h": ["common/a.h"],
    "kernels/gemm_backend.h": ["common/gemm/g.h"],
    "kernels/cuda/private.h": ["kernels/gemm_backend.h"],
    "kernels/cuda/backend/internal/slots.h": ["kernels/cuda/private.h"],
    "kernels/cuda/backend/cuda_backend.h": [
        "kernels/cuda/private.h", "kernels/cuda/backend/internal/slots.h"],
    "server/s.cc": ["kernels/cuda/backend/cuda_backend.h", "server/ring/attached_ring.h",
                    "matmul/v1/matmul.pb.h"],
    "server/ring/attached_ring.h": ["server/transport/peer_credentials.h"],
    "server/transport/peer_credentials.h": ["common/a.h"],
    "client/c.cc": ["common/gemm/g.h"],
    "tests/t.cc": ["server/s.cc", "client/c.cc"],
}


class CheckIncludesTest(unittest.TestCase):

    def run_check(self, files, *extra, readme=None):
        with tempfile.TemporaryDirectory() as root:
            make_tree(root, files, readme)
            out, err = io.StringIO(), io.StringIO()
            with contextlib.redirect_stdout(out), \
                    contextlib.redirect_stderr(err):
                code = check_includes.main(["--root", root, *extra])
            return code, out.getvalue(), err.getvalue()

    def assert_breach(self, change, expected):
        tree = dict(GOOD_TREE)
        tree.update(change)
        code, _, err = self.run_check(tree)
        self.assertEqual(code, 1, err)
        self.assertIn(expected, err)

    def test_good_tree_passes(self):
        code, out, err = self.run_check(GOOD_TREE)
        self.assertEqual(code, 0, err)
        self.assertIn("OK", out)

    def test_client_may_not_include_kernels_or_server(self):
        self.assert_breach({"client/c.cc": ["kernels/gemm_backend.h"]},
                           "client/ may not include kernels/")
        self.assert_breach({"client/c.cc": ["server/transport/peer_credentials.h"]},
                           "client/ may not include server/")

    def test_server_uses_only_the_public_kernel_headers(self):
        self.assert_breach({"server/s.cc": ["kernels/cuda/private.h"]},
                           "not kernels/cuda/private.h")

    def test_server_rooms_are_layered(self):
        self.assert_breach(
            {"server/execution/device_lane.h": [
                "server/admission/product_admission.h"],
             "server/admission/product_admission.h": []},
            "server/execution/ (layer 2) may not include server/admission/ "
            "(layer 3)")

    def test_a_rooms_private_headers_are_its_own(self):
        tree = {"server/admission/client_quota.h": [],
                "server/api/matmul_service.h": [
                    "server/admission/client_quota.h"]}
        self.assert_breach(tree, "server/admission/client_quota.h is private "
                           "to server/admission/")
        # Tests may reach inside a room.
        code, _, err = self.run_check(dict(GOOD_TREE, **{
            "server/admission/client_quota.h": [],
            "server/api/quota_test.cc": ["server/admission/client_quota.h"]}))
        self.assertEqual(code, 0, err)

    def test_client_rooms_are_layered(self):
        self.assert_breach(
            {"client/ring/request_ring.h": [
                "client/stream_order/stream_ordered_calls.h"],
             "client/stream_order/stream_ordered_calls.h": []},
            "client/ring/ (layer 2) may not include client/stream_order/")
        self.assert_breach(
            {"client/session.h": ["client/regions/registered_region.h"],
             "client/regions/registered_region.h": []},
            "client/ (layer 0) may not include client/regions/")
        self.assert_breach(
            {"client/newroom/x.h": ["client/c.cc"]},
            "client/newroom/ is not a room of ROOMS")

    def test_a_new_server_folder_must_be_a_room(self):
        self.assert_breach(
            {"server/newroom/x.h": ["server/transport/peer_credentials.h"]},
            "server/newroom/ is not a room of ROOMS")

    def test_test_helpers_are_for_tests_only(self):
        helper = {"server/regions/testing/test_region.h": [
            "server/regions/region.h"], "server/regions/region.h": []}
        self.assert_breach(
            dict(helper, **{"server/api/matmul_service.cc": [
                "server/regions/testing/test_region.h"]}),
            "server/regions/testing/test_region.h is a test helper")
        # A room's tests use its helpers, and the helper folder is part of
        # the room: no folder cycle.
        code, _, err = self.run_check(dict(GOOD_TREE, **helper, **{
            "server/regions/region_test.cc": [
                "server/regions/testing/test_region.h"]}))
        self.assertEqual(code, 0, err)

    def test_the_readme_map_names_files_that_exist(self):
        code, _, err = self.run_check(GOOD_TREE, readme=(
            "## Map of a request\n\n`server/gone.cc` then `common/a.h`\n"
            "## Next\n\n`not/checked.cc`\n"))
        self.assertEqual(code, 1)
        self.assertIn("README.md's map names server/gone.cc", err)
        self.assertNotIn("common/a.h", err)
        self.assertNotIn("not/checked.cc", err)
        code, _, err = self.run_check(GOOD_TREE, readme="# no map\n")
        self.assertEqual(code, 1)
        self.assertIn("no '## Map of a request' section", err)

    def test_kernels_may_not_include_server_or_client(self):
        self.assert_breach({"kernels/cuda/private.h": ["client/c.cc"]},
                           "kernels/ may not include client/")

    def test_internal_files_are_their_rooms_own(self):
        self.assert_breach(
            {"kernels/cuda/private.h": [
                "kernels/gemm_backend.h",
                "kernels/cuda/backend/internal/slots.h"]},
            "kernels/cuda/backend/internal/slots.h is internal to "
            "kernels/cuda/backend/")
        self.assert_breach(
            {"tests/t.cc": ["kernels/cuda/backend/internal/slots.h"]},
            "is internal to kernels/cuda/backend/")

    def test_common_may_not_include_kernels(self):
        self.assert_breach({"common/gemm/g.h": ["kernels/gemm_backend.h"]},
                           "common/ may not include kernels/")

    def test_a_folder_cycle_is_reported_with_its_includes(self):
        self.assert_breach(
            {"server/transport/peer_credentials.h": ["server/s.cc"]},
            "include cycle between folders: server, server/ring, "
            "server/transport")

    def test_a_module_cycle_inside_a_folder_is_reported(self):
        # A source including a header that includes the source's own header:
        # the two modules depend on each other though no file includes
        # itself.
        self.assert_breach(
            {"server/f.h": [], "server/f.cc": ["server/f.h", "server/g.h"],
             "server/g.h": ["server/f.h"]},
            "include cycle between modules: server/f, server/g")

    def test_a_header_and_its_source_are_one_module(self):
        code, _, err = self.run_check(dict(
            GOOD_TREE, **{"server/f.h": [], "server/f.cc": ["server/f.h"],
                          "server/f_test.cc": ["server/f.h"]}))
        self.assertEqual(code, 0, err)

    def test_graph_counts_includes_between_folders(self):
        code, out, _ = self.run_check(GOOD_TREE, "--graph")
        self.assertEqual(code, 0)
        rows = {tuple(line.split()) for line in out.splitlines()}
        self.assertIn(("tests", "server", "1"), rows)
        self.assertIn(("server", "kernels/cuda/backend", "1"), rows)
        # Generated and system headers are not part of the graph.
        self.assertFalse(any("matmul/v1" in line for line in out.splitlines()))


if __name__ == "__main__":
    unittest.main()
