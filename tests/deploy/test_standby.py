"""A hot standby of every worker in its pod: the component ``k8s/components/standby`` and its example overlay.

Each worker pod (a plant's processor, the RCA) runs its ``fedrca run`` twice, both ``--standby`` on the
pod's one local directory, so whichever process holds the worker's lock serves and the other takes over
when it dies; the kubelet restarts the dead one, which then waits (docs/deploy.md, "A hot standby in the
pod"). The commands themselves parse with the real CLI in ``test_manifests.py`` (every kustomization).
"""

from __future__ import annotations

from tests.deploy.support import of_kind

OVERLAY = "example-site-standby"


def option(argv: list[str], name: str) -> str:
    return argv[argv.index(name) + 1]


def test_the_component_is_generated(sync):
    files = sync.render_standby()
    present = {p.relative_to(sync.STANDBY).as_posix() for p in sync.STANDBY.rglob("*") if p.is_file()}
    extra = present - set(files)
    assert not extra, f"files in k8s/components/standby/ the generator does not write: {extra}"
    stale = [n for n, text in files.items() if (sync.STANDBY / n).read_text(encoding="utf-8") != text]
    assert not stale, f"k8s/components/standby/{stale} differ from tools/sync-k8s.py's output: run `make k8s`"


def test_each_worker_pod_runs_its_worker_twice_on_one_directory(rendered):
    without = {d["metadata"]["name"]: d for d in of_kind(rendered["example-site"], "Deployment")}
    workers = {
        name
        for name, d in without.items()
        if d["metadata"]["labels"]["app.kubernetes.io/component"] in ("processor", "rca")
    }
    assert workers and any("rca" in name for name in workers)
    for name, deployment in ((d["metadata"]["name"], d) for d in of_kind(rendered[OVERLAY], "Deployment")):
        pod = deployment["spec"]["template"]["spec"]
        before = without[name]["spec"]["template"]["spec"]
        if name not in workers:  # the edge gateways read OPC UA / MQTT / Modbus: no Kafka group to stand by in
            assert pod == before
            continue
        (original,) = before["containers"]
        active, standby = pod["containers"]
        assert active["name"] == original["name"] and standby["name"] == f"{original['name']}-standby"
        # the same command, as a standby, in both: the first to take the lock serves, a restarted one waits
        assert active["args"] == standby["args"] == [*original["args"], "--standby"], name
        argv = active["args"]
        assert option(argv, "--worker-name") == option(original["args"], "--worker-name")
        data_dir = option(argv, "--data-dir")
        for container in (active, standby):
            mounts = {m["mountPath"]: m["name"] for m in container["volumeMounts"]}
            assert mounts[data_dir] == "state", f"{name}/{container['name']}: the worker's lock is under {data_dir}"
            assert container["env"] == original["env"] and container["image"] == original["image"]
        # a standby holds what its worker holds (the overlay's own change of a worker's memory included)
        assert active["resources"] == original["resources"] and standby["resources"] == active["resources"], name
        # one network in the pod: the port is declared once, and the standby's probes ask by number
        assert "ports" not in standby
        port = original["ports"][0]["containerPort"]
        for probe in ("startupProbe", "livenessProbe", "readinessProbe"):
            assert standby[probe]["httpGet"]["port"] == port
            assert active[probe] == original[probe]
        assert pod["volumes"] == before["volumes"]


def test_without_the_component_no_worker_stands_by(rendered):
    for name in ("base", "example-site", "example-site-keda"):
        for deployment in of_kind(rendered[name], "Deployment"):
            for container in deployment["spec"]["template"]["spec"]["containers"]:
                assert "--standby" not in container.get("args", []), (name, deployment["metadata"]["name"])
