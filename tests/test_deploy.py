"""The JupyterHub deployment (deploy/values.yaml), checked without a cluster.

Neither helm nor kubeconform installs from PyPI or Debian here, so the chart is not rendered: the
values are parsed with PyYAML and held to the keys the Zero to JupyterHub chart (4.x) and KubeSpawner
read. A misspelt key is silently ignored by Helm (the workshop would run without culling, or without
a GPU), which is what these tests catch.
"""

import re
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
VALUES = yaml.safe_load((ROOT / "deploy" / "values.yaml").read_text())

# The keys of the chart's values that this deployment may set (z2jh 4.x, values.schema.yaml).
CHART_TOP = {"hub", "proxy", "singleuser", "cull", "prePuller", "scheduling", "ingress", "debug", "rbac", "custom",
             "imagePullSecret", "imagePullSecrets", "global", "fullnameOverride", "nameOverride", "enabled"}
SINGLEUSER = {"image", "uid", "fsGid", "cmd", "defaultUrl", "startTimeout", "storage", "cpu", "memory", "extraEnv",
              "profileList", "extraResource", "extraTolerations", "nodeSelector", "extraLabels", "extraAnnotations",
              "lifecycleHooks", "initContainers", "extraContainers", "networkPolicy", "cloudMetadata",
              "serviceAccountName", "extraPodConfig", "allowPrivilegeEscalation", "events", "podNameTemplate",
              "extraFiles", "extraNodeAffinity", "extraPodAffinity", "extraPodAntiAffinity", "networkTools"}
STORAGE = {"type", "capacity", "homeMountPath", "dynamic", "static", "extraLabels", "extraVolumes",
           "extraVolumeMounts"}
CULL = {"enabled", "users", "adminUsers", "removeNamedServers", "timeout", "every", "concurrency", "maxAge"}
PROFILE = {"display_name", "slug", "description", "default", "kubespawner_override", "profile_options"}
# KubeSpawner traits a profile overrides here.
KUBESPAWNER = {"extra_resource_limits", "extra_resource_guarantees", "environment", "tolerations", "node_selector",
               "image", "cpu_limit", "cpu_guarantee", "mem_limit", "mem_guarantee", "default_url"}


def _profiles():
    return {p["display_name"]: p for p in VALUES["singleuser"]["profileList"]}


def test_only_keys_the_chart_reads():
    assert set(VALUES) <= CHART_TOP, set(VALUES) - CHART_TOP
    assert set(VALUES["singleuser"]) <= SINGLEUSER, set(VALUES["singleuser"]) - SINGLEUSER
    assert set(VALUES["singleuser"]["storage"]) <= STORAGE
    assert set(VALUES["cull"]) <= CULL
    for profile in VALUES["singleuser"]["profileList"]:
        assert set(profile) <= PROFILE, profile
        assert set(profile["kubespawner_override"]) <= KUBESPAWNER, profile


def test_the_course_image_is_the_single_user_image():
    image = VALUES["singleuser"]["image"]
    assert image["name"].endswith("/kernel-lab") and isinstance(image["tag"], str)
    dockerfile = (ROOT / "Dockerfile").read_text()
    assert f"ARG NB_UID={VALUES['singleuser']['uid']}" in dockerfile
    assert VALUES["singleuser"]["storage"]["homeMountPath"] == "/home/jovyan"  # the image's learner's home
    assert VALUES["singleuser"]["defaultUrl"].startswith("/lab/tree/kernel-lab/course/")
    course = VALUES["singleuser"]["defaultUrl"].removeprefix("/lab/tree/kernel-lab/")
    assert (ROOT / course).is_file(), course


def test_gpu_mig_and_cpu_profiles():
    profiles = _profiles()
    assert {"GPU", "CPU only (simulator)"} <= set(profiles)
    assert profiles["GPU"]["kubespawner_override"]["extra_resource_limits"] == {"nvidia.com/gpu": "1"}
    mig = [p for p in profiles.values()
           if any(re.fullmatch(r"nvidia\.com/mig-\dg\.\d+gb", k) for k in p["kubespawner_override"].get(
               "extra_resource_limits", {}))]
    assert len(mig) == 1
    cpu = profiles["CPU only (simulator)"]["kubespawner_override"]
    assert not cpu["extra_resource_limits"]
    assert cpu["environment"]["NVIDIA_VISIBLE_DEVICES"] == "void" and cpu["environment"]["NUMBA_ENABLE_CUDASIM"] == "1"
    assert sum(bool(p.get("default")) for p in profiles.values()) == 1


def test_idle_culling_and_persistent_homes():
    assert VALUES["cull"]["enabled"] is True and 0 < VALUES["cull"]["timeout"] <= 4 * 3600
    storage = VALUES["singleuser"]["storage"]
    assert storage["type"] == "dynamic" and re.fullmatch(r"\d+Gi", storage["capacity"])


def test_the_readme_table_names_every_module():
    readme = (ROOT / "deploy" / "README.md").read_text()
    for module in ("00", "01", "02", "06", "07", "08", "09"):
        assert re.search(rf"^\| {module}\b", readme, re.M), f"deploy/README.md: no row for module {module}"
    assert "kernel-lab warm" in readme


def _memory_script():
    import importlib.util

    spec = importlib.util.spec_from_file_location("gpu_notebook_memory", ROOT / "scripts" / "gpu_notebook_memory.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def test_the_memory_script_reads_nvidia_smi_and_tables_learners_per_gpu():
    mem = _memory_script()
    assert mem.used_mib("1234, 81559\n") == (1234.0, 81559.0)
    results = [mem.Result("solutions/00-x/a.ipynb", 2048.0, 10.0),
               mem.Result("solutions/06-y/b.ipynb", 12288.0, 10.0),
               mem.Result("solutions/07-z/c.ipynb", 512.0, 3.0, "NotebookGated: needs cc>=9.0")]
    rows = mem.table(results, 81559.0).splitlines()
    assert rows[2] == "| solutions/00-x/a.ipynb | 2.00 GiB | 35 | yes |"
    assert rows[3] == "| solutions/06-y/b.ipynb | 12.00 GiB | 5 | no |"
    assert "stopped: NotebookGated" in rows[4]
