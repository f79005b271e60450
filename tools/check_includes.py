#!/usr/bin/python3
"""Checks the include rules between the source tree's folders.

Reads every #include "..." line of the .h/.cc/.cu/.cuh files under the
source root (build trees, which hold a CMakeCache.txt, and hidden folders
are skipped) and checks:

  (a) client/ includes nothing from kernels/ or server/;
  (b) server/ includes from kernels/ only the headers in SERVER_KERNEL_API;
  (c) kernels/ includes nothing from server/ or client/;
  (d) common/ includes nothing from kernels/, server/ or client/;
  (e) no include cycle between folders (a file's folder is its directory,
      e.g. server/ring; includes within one folder are not edges);
  (f) no include cycle between modules, inside a folder or across folders
      (a module is a header with its sources: server/ring/attached_ring.h and
      attached_ring.cc are server/ring/attached_ring; a cycle is, say, a.cc
      including b.h while b.h includes a.h: include guards hide it from the
      compiler, not from a reader);
  (g) a file under an internal/ folder is included only from the folder
      that holds internal/ and below it (kernels/cuda/backend/internal/x.h
      from kernels/cuda/backend/...): the rest of a room's files are its
      own, as abseil's internal/ are;
  (h) the rooms of server/ and client/ (ROOMS) are layered: a room's
      files include no room of a higher layer, and from another room only
      the headers it makes public; tests may reach inside a room, not up
      the layers;
  (i) a file under a testing/ folder (a test helper) is included only by
      tests (*_test.cc, *_fuzzer.cc, tests/) and other test helpers. For
      the cycle checks a testing/ folder is part of the folder above it;
  (j) every path the README's "Map of a request" names (`a/b.cc`,
      `a/b/`) exists, so that the map stays true as files move.

Only includes that name a file of the tree (paths are relative to the root,
as the build's include directory is) count; generated headers such as
matmul/v1/matmul.pb.h and system headers are not part of the graph.

Usage:
  tools/check_includes.py [--root DIR]           # check; exit 1 on a breach
  tools/check_includes.py [--root DIR] --graph   # print the folder graph too
"""

import argparse
import collections
import os
import re
import sys

SOURCE_SUFFIXES = (".h", ".cc", ".cu", ".cuh")
INCLUDE_LINE = re.compile(r'^\s*#\s*include\s+"([^"]+)"')

# The kernels/ headers the server may include: the backend interface and
# the backends it constructs. Everything else in kernels/ is private to it.
SERVER_KERNEL_API = frozenset({
    "kernels/gemm_backend.h",
    "kernels/gemm_batch.h",
    "kernels/gemm_list.h",
    "kernels/launch_stages.h",
    "kernels/device_lost.h",
    "kernels/cpu/cpu_backend.h",
    "kernels/cuda/backend/cuda_backend.h",
    "kernels/cuda/backend/cuda_backend_options.h",
})

# The rooms of server/ and client/: {room: (layer, headers other rooms may
# include, or None: all)}. A file's room is the longest one that holds it.
# server/: the root (main and the server's assembly) sits above the rest;
# a request goes from api/ (the gRPC face) down through admission/ and
# execution/ to the backends and back up once. client/: the core client
# (calls, sessions, request building) at the bottom, then regions, the
# request ring, stream order, and the programs and Python on top.
ROOMS = {
    "server": (5, None),
    "server/api": (4, {"matmul_service.h"}),
    "server/admission": (3, {"product_admission.h"}),
    "server/execution": (2, {"device_lane.h", "dynamic_batcher.h",
                             "executor.h", "matmul_runner.h"}),
    "server/product": (1, {"bound_list.h", "bound_operands.h",
                           "in_flight_requests.h", "pending_product.h",
                           "product_submitter.h", "request_validation.h"}),
    "server/ring": (1, {"attached_ring.h", "ring_pollers.h"}),
    "server/regions": (0, {"cuda_region_device.h", "region.h",
                           "region_opener.h", "region_registry.h",
                           "shm_region.h"}),
    "server/metrics": (0, {"metrics.h", "metrics_http_server.h"}),
    "server/backends": (0, {"backend_factory.h", "backend_options.h",
                            "cuda_versions.h"}),
    "server/transport": (0, {"peer_credentials.h", "peer_identity.h",
                             "unix_socket_listener.h"}),
    "client": (0, None),
    "client/regions": (1, {"cuda_memory.h", "region_request_builder.h",
                           "registered_region.h", "shared_memory_segment.h"}),
    "client/ring": (2, {"request_ring.h"}),
    "client/stream_order": (3, {"stream_ordered_calls.h"}),
    "client/bench": (4, {"bench_report.h", "load_generator.h"}),
    "client/cli": (5, set()),
    "client/python": (5, set()),
}
ROOMED = ("server", "client")

# (folder whose files include, top folders they may not include from)
FORBIDDEN = (
    ("client", ("kernels", "server")),
    ("kernels", ("server", "client")),
    ("common", ("kernels", "server", "client")),
)


def top_folder(path):
    return path.split("/", 1)[0]


def folder_of(path):
    """A file's folder; a testing/ folder counts as the folder above it."""
    folder = os.path.dirname(path)
    if folder == "testing" or folder.endswith("/testing"):
        folder = os.path.dirname(folder)
    return folder or "."


def is_test(path):
    name = os.path.basename(path)
    return (name.endswith(("_test.cc", "_fuzzer.cc")) or
            path.startswith("tests/") or "/testing/" in path)


def room_of(path):
    """(room, layer, public headers) of a file under server/ or client/,
    (folder, None, None) for a folder there that is no room, or None
    elsewhere."""
    if top_folder(path) not in ROOMED:
        return None
    folder = folder_of(path)
    while folder not in ROOMS:
        if "/" not in folder:
            return folder_of(path), None, None
        folder = os.path.dirname(folder)
    # A subfolder of a root that holds rooms must be a room itself.
    if folder in ROOMED and folder_of(path) != folder:
        return folder_of(path), None, None
    return (folder,) + ROOMS[folder]


def room_breaches(path, number, target):
    """Rule (h) for one include."""
    source, destination = room_of(path), room_of(target)
    if source is None or destination is None or source[0] == destination[0]:
        return []
    for room, layer, _ in (source, destination):
        if layer is None:
            return [f"{path}:{number}: {room}/ is not a room of ROOMS in "
                    "tools/check_includes.py"]
    if destination[1] > source[1]:
        return [f"{path}:{number}: {source[0]}/ (layer {source[1]}) may not "
                f"include {destination[0]}/ (layer {destination[1]}): "
                f"{target}"]
    public = destination[2]
    if (public is not None and not is_test(path) and
            target[len(destination[0]) + 1:] not in public):
        return [f"{path}:{number}: {target} is private to {destination[0]}/;"
                " include its public headers "
                f"({', '.join(sorted(public)) or 'none'})"]
    return []


def source_files(root):
    """Root-relative paths of the tree's C++ and CUDA files, sorted."""
    found = []
    for directory, subdirs, files in os.walk(root):
        # A build tree (configured by CMake) or a hidden folder is not source.
        subdirs[:] = sorted(
            d for d in subdirs if not d.startswith(".") and
            not os.path.exists(os.path.join(directory, d, "CMakeCache.txt")))
        for name in files:
            if name.endswith(SOURCE_SUFFIXES):
                found.append(
                    os.path.relpath(os.path.join(directory, name),
                                    root).replace(os.sep, "/"))
    return sorted(found)


def includes(root, files):
    """(including file, line number, included file) for every include of a
    file that exists in the tree."""
    known = set(files)
    result = []
    for path in files:
        with open(os.path.join(root, path), encoding="utf-8",
                  errors="replace") as source:
            for number, line in enumerate(source, start=1):
                match = INCLUDE_LINE.match(line)
                if match and match.group(1) in known:
                    result.append((path, number, match.group(1)))
    return result


def internal_owner(path):
    """The folder whose internal/ holds `path` (the innermost), or None."""
    parts = path.split("/")[:-1]
    for i in range(len(parts) - 1, -1, -1):
        if parts[i] == "internal":
            return "/".join(parts[:i])
    return None


def rule_breaches(edges):
    """Messages for includes that break rules (a) to (d) and (g) to (i)."""
    breaches = []
    for path, number, target in edges:
        source_top, target_top = top_folder(path), top_folder(target)
        for includer, banned in FORBIDDEN:
            if source_top == includer and target_top in banned:
                breaches.append(f"{path}:{number}: {includer}/ may not include "
                                f"{target_top}/ ({target})")
        if (source_top == "server" and target_top == "kernels" and
                target not in SERVER_KERNEL_API):
            breaches.append(f"{path}:{number}: server/ may include from "
                            f"kernels/ only its public headers, not {target}")
        breaches += room_breaches(path, number, target)
        if "/testing/" in "/" + target and not is_test(path):
            breaches.append(f"{path}:{number}: {target} is a test helper; "
                            "only tests may include it")
        owner = internal_owner(target)
        if owner is not None and not (path.startswith(owner + "/") or
                                      (owner == "" and "/" not in path)):
            breaches.append(f"{path}:{number}: {target} is internal to "
                            f"{owner}/; include its public headers instead")
    return breaches


def folder_graph(edges):
    """{(from folder, to folder): include count} between distinct folders."""
    graph = collections.Counter()
    for path, _, target in edges:
        source, destination = folder_of(path), folder_of(target)
        if source != destination:
            graph[(source, destination)] += 1
    return graph


def module_of(path):
    return os.path.splitext(path)[0]


def module_graph(edges):
    """{(from module, to module): include count} between distinct modules."""
    graph = collections.Counter()
    for path, _, target in edges:
        source, destination = module_of(path), module_of(target)
        if source != destination:
            graph[(source, destination)] += 1
    return graph


def cycles(graph):
    """The strongly connected components of more than one node (Tarjan),
    each as a sorted list of nodes (folders or files)."""
    successors = collections.defaultdict(list)
    nodes = set()
    for source, destination in graph:
        successors[source].append(destination)
        nodes.update((source, destination))
    index, low, on_stack, stack, components = {}, {}, set(), [], []

    def visit(node):
        # Iterative, so that a deep graph cannot exhaust Python's stack.
        work = [(node, iter(sorted(successors[node])))]
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        while work:
            current, children = work[-1]
            advanced = False
            for child in children:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(successors[child]))))
                    advanced = True
                    break
                if child in on_stack:
                    low[current] = min(low[current], index[child])
            if advanced:
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[current])
            if low[current] == index[current]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == current:
                        break
                if len(component) > 1:
                    components.append(sorted(component))

    for node in sorted(nodes):
        if node not in index:
            visit(node)
    return sorted(components)


def cycle_breaches(edges, graph):
    """Messages naming the includes that close each folder cycle."""
    breaches = []
    for component in cycles(graph):
        members = set(component)
        breaches.append("include cycle between folders: " +
                        ", ".join(component))
        for path, number, target in edges:
            source, destination = folder_of(path), folder_of(target)
            if source != destination and {source, destination} <= members:
                breaches.append(f"  {path}:{number}: includes {target}")
    return breaches


def module_cycle_breaches(edges):
    """Messages naming the includes that close each module cycle."""
    breaches = []
    for component in cycles(module_graph(edges)):
        members = set(component)
        breaches.append("include cycle between modules: " +
                        ", ".join(component))
        for path, number, target in edges:
            source, destination = module_of(path), module_of(target)
            if source != destination and {source, destination} <= members:
                breaches.append(f"  {path}:{number}: includes {target}")
    return breaches


MAP_SECTION = "## Map of a request"
MAP_PATH = re.compile(r"`([\w.-]+(?:/[\w.-]+)*/(?:[\w.-]+)?)`")


def readme_map_breaches(root):
    """Rule (j): the README's map names only paths that exist."""
    try:
        with open(os.path.join(root, "README.md"), encoding="utf-8") as f:
            text = f.read()
    except FileNotFoundError:
        return []
    start = text.find(MAP_SECTION + "\n")
    if start < 0:
        return [f"README.md has no '{MAP_SECTION}' section"]
    end = text.find("\n## ", start + 1)
    section = text[start:end if end >= 0 else len(text)]
    return [f"README.md's map names {path}, which does not exist"
            for path in MAP_PATH.findall(section)
            if not os.path.exists(os.path.join(root, path))]


def print_graph(graph, out):
    rows = sorted(graph.items())
    width_from = max([len("from")] + [len(s) for (s, _), _ in rows])
    width_to = max([len("to")] + [len(d) for (_, d), _ in rows])
    out.write(f"{'from':<{width_from}}  {'to':<{width_to}}  count\n")
    for (source, destination), count in rows:
        out.write(f"{source:<{width_from}}  {destination:<{width_to}}  "
                  f"{count:>5}\n")


def main(argv):
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=__doc__.split("\n\n", 1)[1])
    parser.add_argument(
        "--root",
        default=os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
        help="the source tree (default: the one this script is in)")
    parser.add_argument("--graph", action="store_true",
                        help="print the folder include graph (from, to, "
                        "count) before checking")
    args = parser.parse_args(argv)

    files = source_files(args.root)
    if not files:
        print(f"no source files under {args.root}", file=sys.stderr)
        return 2
    edges = includes(args.root, files)
    graph = folder_graph(edges)
    if args.graph:
        print_graph(graph, sys.stdout)
    breaches = (rule_breaches(edges) + cycle_breaches(edges, graph) +
                module_cycle_breaches(edges) + readme_map_breaches(args.root))
    for breach in breaches:
        print(breach, file=sys.stderr)
    if breaches:
        print(f"check_includes: {len(breaches)} problem(s) in {len(files)} "
              "files", file=sys.stderr)
        return 1
    print(f"check_includes: {len(files)} files, {len(edges)} includes, "
          f"{len(graph)} folder edges: OK")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
