#!/usr/bin/env python3
"""The container and deployment files against the daemon they deploy.

No Docker engine or Kubernetes cluster runs here, so this parses every
manifest under deploy/ (and the Dockerfile) and checks what would break a
deployment silently: every daemon flag they pass exists (matmul-server
--help), the socket and tuning-cache paths the flags name are volumes,
every health check runs `matmul-cli health` against the socket --listen
names, the metrics port of --metrics_listen is the one exposed, published,
selected and scraped, the image is the project's version, the daemon runs
unprivileged with the host's IPC and PID namespaces, Grafana's provisioning
points at the files compose mounts, and the PrometheusRule carries
alerts.yml verbatim. Then it runs deploy/collect_runtime.sh (the
Dockerfile's packaging step) on the real build and starts the collected
matmul-cli from it.

Usage: deploy_manifests_test.py SOURCE_DIR BUILD_DIR MATMUL_SERVER
"""

import json
import os
import re
import subprocess
import sys
import tempfile
import unittest

import yaml

SOURCE = BUILD = SERVER = None


def flag_values(args, name):
    """Values of --name=value in an argument list."""
    prefix = f"--{name}="
    return [a[len(prefix):] for a in args if a.startswith(prefix)]


def one_flag(test, args, name, where):
    values = flag_values(args, name)
    test.assertEqual(len(values), 1, f"{where}: expected one --{name}, got {values}")
    return values[0]


def built_with_cuda(build):
    """False for a build configured with MATMUL_CUDA=OFF (CMakeCache.txt)."""
    with open(os.path.join(build, "CMakeCache.txt")) as cache:
        return "MATMUL_CUDA:BOOL=OFF" not in cache.read().splitlines()


def load_yaml(path):
    with open(path) as f:
        return list(yaml.safe_load_all(f))


class Dockerfile:
    """The instructions of a Dockerfile, continuation lines joined."""

    def __init__(self, path):
        with open(path) as f:
            text = f.read()
        text = re.sub(r"\\\n", " ", text)
        self.instructions = []
        for line in text.splitlines():
            line = line.strip()
            if not line or line.startswith("#"):
                continue
            keyword, _, rest = line.partition(" ")
            self.instructions.append((keyword.upper(), rest.strip()))

    def all(self, keyword):
        return [rest for k, rest in self.instructions if k == keyword]

    def exec_form(self, keyword):
        """The JSON list of the last `keyword` instruction (CMD, ENTRYPOINT)."""
        rest = self.all(keyword)[-1]
        if keyword == "HEALTHCHECK":
            rest = rest[rest.index("CMD") + 3:].strip()
        return json.loads(rest)


class DeployManifestsTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        help_text = subprocess.run([SERVER, "--helpfull"], capture_output=True,
                                   text=True, timeout=30).stdout
        cls.daemon_flags = set(re.findall(r"^\s+--(\w+) \(", help_text, re.M))
        with open(os.path.join(SOURCE, "CMakeLists.txt")) as f:
            cls.version = re.search(r"project\(\w+ VERSION ([\d.]+)", f.read()).group(1)
        deploy = os.path.join(SOURCE, "deploy")
        cls.deploy = deploy
        cls.compose = load_yaml(os.path.join(deploy, "compose.yaml"))[0]
        cls.k8s = {}
        cls.services = {}  # by name
        for name in sorted(os.listdir(os.path.join(deploy, "k8s"))):
            for doc in load_yaml(os.path.join(deploy, "k8s", name)):
                if doc["kind"] == "Service":
                    cls.services[doc["metadata"]["name"]] = doc
                else:
                    cls.k8s[doc["kind"]] = doc
        # The Service Prometheus scrapes through.
        cls.k8s["Service"] = cls.services["matmul"]
        cls.dockerfile = Dockerfile(os.path.join(SOURCE, "Dockerfile"))
        daemon_set = cls.k8s["DaemonSet"]
        cls.pod = daemon_set["spec"]["template"]["spec"]
        cls.container = next(c for c in cls.pod["containers"] if c["name"] == "matmul")
        # The daemon's argument lists, by where they are written.
        cls.daemon_args = {
            "Dockerfile CMD": cls.dockerfile.exec_form("CMD"),
            "compose.yaml": cls.compose["services"]["matmul"]["command"],
            "k8s DaemonSet": cls.container["args"],
        }

    def test_every_file_parses(self):
        self.assertGreater(len(self.daemon_flags), 20, "matmul-server --helpfull listed no flags")
        for root, _, files in os.walk(self.deploy):
            for name in files:
                path = os.path.join(root, name)
                if name.endswith((".yml", ".yaml")):
                    self.assertTrue(all(d is not None for d in load_yaml(path)), path)
                elif name.endswith(".json"):
                    with open(path) as f:
                        json.load(f)
        self.assertEqual(set(self.k8s), {"Namespace", "DaemonSet", "Service",
                                         "ServiceMonitor", "PrometheusRule"})

    def test_every_daemon_flag_exists(self):
        for where, args in self.daemon_args.items():
            for arg in args:
                self.assertTrue(arg.startswith("--"), f"{where}: {arg!r} is not a flag")
                name = arg[2:].split("=", 1)[0]
                self.assertIn(name, self.daemon_flags,
                              f"{where}: matmul-server has no --{name}")
        self.assertEqual(self.dockerfile.exec_form("ENTRYPOINT"), ["matmul-server"])

    def socket_path(self, where):
        listen = one_flag(self, self.daemon_args[where], "listen", where).split(",")
        sockets = [a for a in listen if a.startswith("unix:")]
        self.assertEqual(len(sockets), 1, f"{where}: --listen={listen}")
        return sockets[0][len("unix:"):]

    def test_grpc_service_names_every_daemon_over_tls(self):
        service = self.services["matmul-grpc"]
        self.assertEqual(service["spec"]["clusterIP"], "None")  # headless
        pod_labels = self.k8s["DaemonSet"]["spec"]["template"]["metadata"]["labels"]
        self.assertLessEqual(service["spec"]["selector"].items(), pod_labels.items())
        port = next(p for p in service["spec"]["ports"] if p["name"] == "grpc")
        container_ports = {p["name"]: p["containerPort"] for p in self.container["ports"]}
        self.assertEqual(port["targetPort"], "grpc")
        args = self.container["args"]
        listen = one_flag(self, args, "listen", "k8s DaemonSet").split(",")
        self.assertIn(f"0.0.0.0:{container_ports['grpc']}", listen)
        # TCP beyond loopback: TLS from the mounted Secret, never insecure.
        self.assertEqual(flag_values(args, "allow_insecure_tcp"), [])
        mounts = {m["name"]: m["mountPath"] for m in self.container["volumeMounts"]}
        volumes = {v["name"]: v for v in self.pod["volumes"]}
        for flag in ("tls_cert", "tls_key"):
            path = one_flag(self, args, flag, "k8s DaemonSet")
            self.assertEqual(os.path.dirname(path), mounts["tls"])
        self.assertEqual(volumes["tls"]["secret"]["secretName"], "matmul-tls")

    def test_socket_and_cache_are_volumes(self):
        sockets = {w: self.socket_path(w) for w in self.daemon_args}
        self.assertEqual(len(set(sockets.values())), 1, sockets)
        socket = next(iter(sockets.values()))
        socket_dir = os.path.dirname(socket)
        self.assertEqual(socket_dir, "/run/matmul")
        caches = {w: one_flag(self, a, "tuning_cache", w) for w, a in self.daemon_args.items()}
        self.assertEqual(len(set(caches.values())), 1, caches)
        cache_dir = os.path.dirname(next(iter(caches.values())))
        for where, args in self.daemon_args.items():
            self.assertEqual(one_flag(self, args, "socket_mode", where), "0660", where)

        volumes = json.loads(self.dockerfile.all("VOLUME")[-1])
        self.assertIn(socket_dir, volumes)
        self.assertIn(cache_dir, volumes)

        compose_targets = {}
        for volume in self.compose["services"]["matmul"]["volumes"]:
            if isinstance(volume, dict):
                compose_targets[volume["target"]] = volume
            else:
                source, target = volume.split(":")[:2]
                compose_targets[target] = {"source": source, "type": "volume"}
        # The socket directory is the host's own.
        self.assertEqual(compose_targets[socket_dir]["type"], "bind")
        self.assertEqual(compose_targets[socket_dir]["source"], socket_dir)
        self.assertIn(cache_dir, compose_targets)

        mounts = {m["mountPath"]: m["name"] for m in self.container["volumeMounts"]}
        volumes = {v["name"]: v for v in self.pod["volumes"]}
        self.assertEqual(volumes[mounts[socket_dir]]["hostPath"]["path"], socket_dir)
        self.assertIn(cache_dir, mounts)
        self.assertIn("hostPath", volumes[mounts[cache_dir]])

    def assert_health_command(self, command, where):
        self.assertEqual(command[:2], ["matmul-cli", "health"], where)
        target = one_flag(self, command, "target", where)
        self.assertEqual(target, "unix:" + self.socket_path("k8s DaemonSet"), where)
        timeout = one_flag(self, command, "timeout", where)
        self.assertRegex(timeout, r"^\d+s$", where)
        return int(timeout[:-1])

    def test_health_checks_run_matmul_cli_health(self):
        healthcheck = self.dockerfile.all("HEALTHCHECK")[-1]
        timeout = self.assert_health_command(self.dockerfile.exec_form("HEALTHCHECK"),
                                             "Dockerfile HEALTHCHECK")
        docker_timeout = int(re.search(r"--timeout=(\d+)s", healthcheck).group(1))
        self.assertLess(timeout, docker_timeout, "the CLI must give up before Docker does")

        test = self.compose["services"]["matmul"]["healthcheck"]["test"]
        self.assertEqual(test[0], "CMD")
        self.assert_health_command(test[1:], "compose healthcheck")

        for probe in ("startupProbe", "livenessProbe", "readinessProbe"):
            spec = self.container[probe]
            timeout = self.assert_health_command(spec["exec"]["command"], f"k8s {probe}")
            self.assertLess(timeout, spec["timeoutSeconds"], probe)

    def test_metrics_port_is_exposed_published_and_scraped(self):
        ports = set()
        for where, args in self.daemon_args.items():
            listen = one_flag(self, args, "metrics_listen", where)
            host, _, port = listen.rpartition(":")
            # Reachable from outside the container (Prometheus's, the pod's).
            self.assertEqual(host, "0.0.0.0", where)
            ports.add(int(port))
        self.assertEqual(len(ports), 1, ports)
        port = ports.pop()
        self.assertIn(str(port), " ".join(self.dockerfile.all("EXPOSE")).split())

        published = self.compose["services"]["matmul"]["ports"]
        self.assertIn(f"127.0.0.1:{port}:{port}", published)
        prometheus = load_yaml(os.path.join(self.deploy, "prometheus", "prometheus.yml"))[0]
        job = next(j for j in prometheus["scrape_configs"] if j["job_name"] == "matmul")
        self.assertEqual(job["static_configs"][0]["targets"], [f"matmul:{port}"])
        self.assertIn("matmul", self.compose["services"])

        container_ports = {p["name"]: p["containerPort"] for p in self.container["ports"]}
        self.assertEqual(container_ports["metrics"], port)
        service = self.k8s["Service"]
        pod_labels = self.k8s["DaemonSet"]["spec"]["template"]["metadata"]["labels"]
        self.assertLessEqual(service["spec"]["selector"].items(), pod_labels.items())
        service_port = next(p for p in service["spec"]["ports"] if p["name"] == "metrics")
        self.assertIn(service_port["targetPort"], ("metrics", port))
        # The alert rules select job="matmul": the Operator names the job
        # after the Service.
        self.assertEqual(service["metadata"]["name"], "matmul")
        monitor = self.k8s["ServiceMonitor"]
        self.assertLessEqual(monitor["spec"]["selector"]["matchLabels"].items(),
                             service["metadata"]["labels"].items())
        self.assertEqual([e["port"] for e in monitor["spec"]["endpoints"]], ["metrics"])
        self.assertIn(service["metadata"]["namespace"],
                      monitor["spec"]["namespaceSelector"]["matchNames"])

    def test_image_host_namespaces_and_user(self):
        image = f"matmul:{self.version}"
        self.assertEqual(self.compose["services"]["matmul"]["image"],
                         "${MATMUL_IMAGE:-" + image + "}")
        for container in self.pod["containers"] + self.pod.get("initContainers", []):
            self.assertEqual(container["image"], image, container["name"])

        service = self.compose["services"]["matmul"]
        self.assertEqual(service["gpus"], "all")
        self.assertEqual(service["ipc"], "host")
        self.assertEqual(service["pid"], "host")
        self.assertTrue(self.pod["hostIPC"])
        self.assertTrue(self.pod["hostPID"])

        user = self.dockerfile.all("USER")[-1].split(":")[0]
        self.assertNotIn(user, ("root", "0"))
        security = dict(self.pod["securityContext"], **self.container.get("securityContext", {}))
        self.assertTrue(security["runAsNonRoot"])
        self.assertNotEqual(security["runAsUser"], 0)
        # The socket's group is one the daemon is in.
        group = one_flag(self, self.container["args"], "socket_group", "k8s DaemonSet")
        self.assertIn(int(group), [security["runAsGroup"]] + security.get("supplementalGroups", []))
        # compose: the same variable in --socket_group and group_add.
        variable = re.compile(r"^\$\{(\w+)[}:]")
        compose_group = one_flag(self, service["command"], "socket_group", "compose.yaml")
        self.assertRegex(compose_group, variable)
        self.assertIn(variable.match(compose_group).group(1),
                      [variable.match(str(g)).group(1) for g in service["group_add"]])

    def test_dockerfile_builds_with_the_deploy_scripts(self):
        stages = self.dockerfile.all("FROM")
        self.assertEqual(len(stages), 2, stages)
        self.assertEqual(stages, ["${BUILD_IMAGE} AS build", "${RUNTIME_IMAGE}"])
        args = self.dockerfile.all("ARG")
        self.assertIn("CUDA_VERSION=13.0.0", args)
        # By default the NVIDIA CUDA images; build arguments name others.
        self.assertIn("BUILD_IMAGE=nvidia/cuda:${CUDA_VERSION}-devel-ubuntu24.04", args)
        self.assertIn("RUNTIME_IMAGE=nvidia/cuda:${CUDA_VERSION}-runtime-ubuntu24.04", args)
        # The build stage installs the build profile alone.
        self.assertIn("deploy/install_deps.sh build ", " ".join(self.dockerfile.all("RUN")))
        archs = next(a for a in self.dockerfile.all("ARG") if a.startswith("CUDA_ARCHITECTURES="))
        self.assertEqual(set(archs.split("=", 1)[1].strip('"').split(";")), {"121a", "90a", "120a"})
        runs = " ".join(self.dockerfile.all("RUN"))
        for script in ("deploy/install_deps.sh", "deploy/build.sh", "deploy/collect_runtime.sh"):
            self.assertIn(script, runs)
            self.assertTrue(os.access(os.path.join(SOURCE, script), os.X_OK), script)
        self.assertIn("--from=build /opt/matmul /opt/matmul", self.dockerfile.all("COPY"))

    def test_grafana_provisioning_matches_compose(self):
        grafana = self.compose["services"]["grafana"]
        mounts = dict(v.split(":")[:2] for v in grafana["volumes"])
        provisioning = os.path.join(self.deploy, "grafana", "provisioning")
        self.assertEqual(mounts["./grafana/provisioning"], "/etc/grafana/provisioning")
        providers = load_yaml(os.path.join(provisioning, "dashboards", "matmul.yml"))[0]
        path = providers["providers"][0]["options"]["path"]
        self.assertEqual(mounts["./grafana/dashboards"], path)
        self.assertTrue(os.path.exists(os.path.join(self.deploy, "grafana", "dashboards",
                                                    "matmul.json")))
        datasource = load_yaml(os.path.join(provisioning, "datasources", "prometheus.yml"))[0]
        url = datasource["datasources"][0]["url"]
        self.assertEqual(url, "http://prometheus:9090")
        self.assertIn("prometheus", self.compose["services"])
        prometheus = self.compose["services"]["prometheus"]
        self.assertIn("./prometheus:/etc/prometheus:ro", prometheus["volumes"])
        self.assertIn("--config.file=/etc/prometheus/prometheus.yml", prometheus["command"])
        self.assertEqual(self.compose["services"]["dcgm-exporter"]["profiles"], ["dcgm"])

    def test_prometheus_rule_is_alerts_yml(self):
        alerts = load_yaml(os.path.join(self.deploy, "prometheus", "alerts.yml"))[0]
        self.assertEqual(self.k8s["PrometheusRule"]["spec"]["groups"], alerts["groups"])

    def test_collect_runtime_packs_runnable_binaries(self):
        if not built_with_cuda(BUILD):
            self.skipTest("collect_runtime.sh packs the CUDA image's binaries "
                          "(matmul-tune, matmul-bench); this build has no CUDA")
        with tempfile.TemporaryDirectory() as dest:
            subprocess.run([os.path.join(SOURCE, "deploy", "collect_runtime.sh"), BUILD, dest],
                           check=True, capture_output=True, timeout=300)
            self.assertEqual(sorted(os.listdir(os.path.join(dest, "bin"))),
                             ["matmul-bench", "matmul-cli", "matmul-server", "matmul-tune"])
            # The probe's binary runs from the collected tree alone.
            env = dict(os.environ, LD_LIBRARY_PATH=os.path.join(dest, "lib"))
            result = subprocess.run(
                [os.path.join(dest, "bin", "matmul-cli"), "health",
                 "--target=unix:" + os.path.join(dest, "nobody.sock"), "--timeout=1s"],
                capture_output=True, text=True, env=env, timeout=30)
            self.assertEqual(result.returncode, 1, result.stderr)
            self.assertIn("is matmul-server listening", result.stderr)


if __name__ == "__main__":
    SOURCE, BUILD, SERVER = sys.argv[1:4]
    unittest.main(argv=sys.argv[:1] + sys.argv[4:], verbosity=2)
