import ClipFlowTestSupport
import Foundation
import XCTest

/// `clipflow batch` as the unit of work of a real Slurm (deploy/slurm/local-cluster.sh: munged,
/// slurmctld, slurmd on 127.0.0.1) and of a Kubernetes Indexed Job (deploy/kubernetes), with
/// inputs and outputs on a real S3 server (SeaweedFS).
final class BatchSlurmCLITests: XCTestCase {
    let fx = Fixtures.shared

    var binary: String {
        URL(fileURLWithPath: CommandLine.arguments[0]).deletingLastPathComponent().appendingPathComponent("clipflow").path
    }

    func skipUnlessSlurm() throws {
        try XCTSkipUnless(SlurmCluster.isAvailable, "needs root and Debian's slurm-wlm and munge (scripts/install-test-deps.sh)")
    }

    static let kubernetesManifest = SlurmCluster.repositoryRoot.appendingPathComponent("deploy/kubernetes/clipflow-batch-job.yaml")

    // MARK: Fixtures

    static let fragmentsPerSet = 10
    static let framesPerFragment = 15  // 0.5 s at 30 fps

    /// The pipeline run once per row: the row's fragments (`CLIPS`, an S3 prefix) merged into
    /// `OUT` (an S3 key).
    func makeMergePipeline(in dir: URL) throws -> URL {
        let file = dir.appendingPathComponent("merge.json")
        let json = """
            {
              "version": 1,
              "stages": [
                { "id": "clips", "kind": "files", "glob": "${CLIPS}/fragment*.mp4", "sort": "name" },
                { "id": "merged", "kind": "merge", "inputs": ["clips"], "output": "${OUT}" }
              ]
            }
            """
        try json.write(to: file, atomically: true, encoding: .utf8)
        return file
    }

    /// `count` sets of ten 0.5 s H.264/AAC fragments on `s3` (fragments/set-NNN/fragmentI.mp4),
    /// and the rows CSV (CLIPS, OUT) merging each into merged/set-NNN.mp4. Returns the rows file
    /// and the output keys, row by row.
    func makeFragmentSets(count: Int, on s3: SeaweedFS, in dir: URL) throws -> (rows: URL, outputs: [String]) {
        let fragments = try (0..<Self.fragmentsPerSet).map { try fx.toneClip($0, seconds: 0.5, size: "320x240") }
        let tree = dir.appendingPathComponent("fragments")
        var csv = "CLIPS,OUT\n"
        var outputs: [String] = []
        for set in 0..<count {
            let name = String(format: "set-%03d", set)
            let folder = tree.appendingPathComponent(name)
            try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
            for (i, fragment) in fragments.enumerated() {
                try FileManager.default.linkItem(atPath: fragment, toPath: folder.appendingPathComponent("fragment\(i).mp4").path)
            }
            outputs.append("merged/\(name).mp4")
            csv += "s3://\(s3.bucket)/fragments/\(name),s3://\(s3.bucket)/merged/\(name).mp4\n"
        }
        try s3.putTree(tree, prefix: "fragments/")
        let rows = dir.appendingPathComponent("rows.csv")
        try csv.write(to: rows, atomically: true, encoding: .utf8)
        return (rows, outputs)
    }

    // MARK: Tests

    /// The issue's run: an array of one task per row against SeaweedFS; one task cancelled
    /// (`scancel`) once its row has started, and requeued (`scontrol requeue`); one row whose
    /// fragments do not exist.
    /// Every good row's output exists exactly once and plays, no multipart upload is left open,
    /// and the bad row fails alone, for good (exit 65, not requeued).
    func testArrayJobWithACancelledAndRequeuedTaskWritesEveryOutputOnce() throws {
        try skipUnlessSlurm()
        let s3 = try SeaweedFS.start(buckets: ["clipflow"])
        defer { s3.stop() }
        let cluster = try SlurmCluster.start()
        defer { cluster.stop() }
        let work = fx.scratch("batch-slurm")
        let pipeline = try makeMergePipeline(in: work)
        let goodRows = 6
        let (rows, outputs) = try makeFragmentSets(count: goodRows, on: s3, in: work)
        // One more row, after the good ones: fragments that were never uploaded.
        try ("s3://\(s3.bucket)/fragments/never-uploaded,s3://\(s3.bucket)/merged/never.mp4\n").appendLine(to: rows)
        let badRow = goodRows

        let job = try cluster.submitArray(
            script: SlurmCluster.clipflowBatchScript, arguments: [pipeline.path, rows.path, "--events", "json"], tasks: 0...badRow,
            environment: s3.environment.merging(["CLIPFLOW": binary, "CLIPFLOW_MAX_REQUEUES": "2"]) { _, new in new },
            workingDirectory: work)

        // Cancel a good row's task while clipflow runs it: once clipflow's events say the row has
        // started. A task can finish first (a row takes well under a second): then try the next.
        var victim: Int?
        var cancelled: SlurmCluster.Task?
        var tried: Set<Int> = [badRow]
        while victim == nil, tried.count <= goodRows {
            let running = try cluster.wait(job: job, timeout: 120, for: "running a task not tried yet", pollInterval: 0.02) { tasks in
                tasks.values.contains { $0.state == "RUNNING" && !tried.contains($0.task) }
            }
            let task = try XCTUnwrap(running.values.filter { $0.state == "RUNNING" && !tried.contains($0.task) }.map(\.task).min())
            tried.insert(task)
            let deadline = Date().addingTimeInterval(30)
            let started = "\"stage\":\"batch\",\"row\":\(task),\"event\":\"started\""
            while !cluster.output(job: job, task: task).contains(started), Date() < deadline { usleep(5_000) }
            _ = try cluster.command(["scancel", "\(job)_\(task)"], check: false)
            let ended = try cluster.wait(job: job, timeout: 60, for: "task \(task) ended") { $0[task]?.hasEnded == true }
            if ended[task]?.state == "CANCELLED" { (victim, cancelled) = (task, ended[task]) }
        }
        let killed = try XCTUnwrap(victim, "every task finished before scancel reached it")
        XCTAssertEqual(cancelled?.exitStatus, 130, "clipflow stops the row on SIGTERM: \(cluster.output(job: job, task: killed))")
        // Other tasks may be publishing at this moment: only the victim's own uploads count here.
        XCTAssertFalse(
            try s3.pendingMultipartUploadKeys().contains(outputs[killed]),
            "a cancelled task aborts its upload: \(cluster.output(job: job, task: killed))")
        XCTAssertFalse(
            try s3.keys(prefix: "merged/").contains(outputs[killed]), "a cancelled run leaves no output: \(cluster.output(job: job, task: killed))")
        try cluster.requeue(job: job, task: killed)

        let ended = try cluster.waitUntilEnded(job: job, timeout: 600)
        let context = "\(ended.values.sorted { $0.task < $1.task }.map(\.description))\n\(cluster.logs)"
        for task in 0..<goodRows {
            XCTAssertEqual(ended[task]?.state, "COMPLETED", "task \(task): \(cluster.output(job: job, task: task))\n\(context)")
        }
        XCTAssertEqual(ended[killed]?.restarts, 1, "the cancelled task ran again once (cancelled: \(cancelled?.description ?? "?"))")
        XCTAssertEqual(
            cluster.completions(job: job).filter { $0.task == killed }.map { $0.state }, ["CANCELLED", "PENDING", "COMPLETED"],
            "the victim's ends, as Slurm recorded them: cancelled, requeued (logged as PENDING), completed")
        let bad = try XCTUnwrap(ended[badRow])
        XCTAssertEqual(bad.state, "FAILED", "\(bad): \(cluster.output(job: job, task: badRow))")
        XCTAssertEqual(bad.exitStatus, 65, "a missing input is permanent: \(cluster.output(job: job, task: badRow))")
        XCTAssertEqual(bad.restarts, 0, "a permanent failure is not requeued")

        // Every output once, nothing else under merged/, no upload left open, each one plays.
        XCTAssertEqual(try s3.keys(prefix: "merged/").sorted(), outputs.sorted())
        XCTAssertEqual(try s3.pendingMultipartUploads(), 0)
        for key in outputs {
            let local = work.appendingPathComponent(URL(fileURLWithPath: key).lastPathComponent)
            try s3.download(key: key, to: local)
            XCTAssertEqual(try Probe.videoFrames(local.path), Self.fragmentsPerSet * Self.framesPerFragment, key)
            XCTAssertEqual(try Probe.decodeErrors(local.path), "", key)
        }
    }

    /// What deploy/slurm/clipflow-batch.sbatch makes of each exit status, with a stand-in for
    /// clipflow whose status depends on the task: 0 completes; 65 and 64 fail for good; 75 is
    /// requeued by the script (on the last task, whose job id is the array's own: only that task
    /// runs again) and fails once CLIPFLOW_MAX_REQUEUES is used up; a task cancelled by scancel
    /// (the stand-in exits 130 on SIGTERM, as clipflow does) stays cancelled.
    func testBatchScriptRequeuesRetryableExitsOnly() throws {
        try skipUnlessSlurm()
        let cluster = try SlurmCluster.start()
        defer { cluster.stop() }
        let work = fx.scratch("batch-slurm-exits")
        let standIn = work.appendingPathComponent("clipflow-stand-in")
        try """
        #!/bin/bash
        # Task I exits as the test expects; the arguments are echoed for the test to check.
        # Task 4 waits in `wait`, which a trapped TERM interrupts at once (a foreground child
        # would hold the trap back until it ends); Slurm signals the sleep and this shell apart,
        # and a shell whose sleep dies first waits on a new one until its own TERM arrives.
        echo "stand-in: $* (task $SLURM_ARRAY_TASK_ID, restart ${SLURM_RESTART_COUNT:-0})"
        trap 'exit 130' TERM
        case $SLURM_ARRAY_TASK_ID in
          0) exit 0 ;;
          1) exit 65 ;;
          2) exit 64 ;;
          3) exit 75 ;;
          4) for _ in $(seq 240); do sleep 1 & wait $!; done; exit 0 ;;
          5) [ "${SLURM_RESTART_COUNT:-0}" -ge 1 ] && exit 0; exit 75 ;;
        esac
        """.write(to: standIn, atomically: true, encoding: .utf8)
        chmod(standIn.path, 0o755)

        let job = try cluster.submitArray(
            script: SlurmCluster.clipflowBatchScript, arguments: ["pipeline.json", "rows.csv", "--quiet"], tasks: 0...5,
            environment: ["CLIPFLOW": standIn.path, "CLIPFLOW_MAX_REQUEUES": "1"], workingDirectory: work)
        _ = try cluster.wait(job: job, timeout: 120, for: "task 4 running") { $0[4]?.state == "RUNNING" }
        try cluster.cancel(job: job, task: 4)
        let ended = try cluster.waitUntilEnded(job: job, timeout: 300)
        func check(_ task: Int, _ state: String, exit: Int, restarts: Int, _ line: UInt = #line) {
            let t = ended[task]
            let why = "\(t?.description ?? "task \(task) missing"): \(cluster.output(job: job, task: task))"
            XCTAssertEqual(t?.state, state, why, line: line)
            XCTAssertEqual(t?.exitStatus, exit, why, line: line)
            XCTAssertEqual(t?.restarts, restarts, why, line: line)
        }
        check(0, "COMPLETED", exit: 0, restarts: 0)
        check(1, "FAILED", exit: 65, restarts: 0)
        check(2, "FAILED", exit: 64, restarts: 0)
        check(3, "FAILED", exit: 75, restarts: 1)
        check(4, "CANCELLED", exit: 130, restarts: 0)
        check(5, "COMPLETED", exit: 0, restarts: 1)
        XCTAssertTrue(
            cluster.output(job: job, task: 0).contains("stand-in: batch pipeline.json --rows rows.csv --quiet (task 0, restart 0)"),
            cluster.output(job: job, task: 0))
        // Task 5's requeue touched no other task: each ran once more at most, as counted above,
        // and Slurm recorded exactly these ends.
        let ends = Dictionary(grouping: cluster.completions(job: job), by: { $0.task }).mapValues { $0.map { $0.state } }
        XCTAssertEqual(ends[0], ["COMPLETED"])
        XCTAssertEqual(ends[3], ["PENDING", "FAILED"], "requeued once (the log records a requeue as PENDING), then given up")
        XCTAssertEqual(ends[5], ["PENDING", "COMPLETED"])
    }

    /// deploy/kubernetes/clipflow-batch-job.yaml read as the Job API reads it (PyYAML, the
    /// batch/v1 rules that apply): an Indexed Job whose completions match the rows, whose
    /// podFailurePolicy fails an index on 65 and 64, counts 75 and 130 against
    /// backoffLimitPerIndex and ignores disruptions, and whose pod runs `clipflow batch` on the
    /// ConfigMap's pipeline and rows with the S3 settings from a Secret.
    func testKubernetesManifestIsAnIndexedJobWithTheExitCodePolicy() throws {
        let manifest = Self.kubernetesManifest.path
        let check = """
            import csv, io, json, sys, yaml
            docs = [d for d in yaml.safe_load_all(open(sys.argv[1])) if d]
            kinds = {d["kind"]: d for d in docs}
            cm, job = kinds["ConfigMap"], kinds["Job"]
            assert job["apiVersion"] == "batch/v1"
            s = job["spec"]
            known = {"activeDeadlineSeconds", "backoffLimit", "backoffLimitPerIndex", "completionMode", "completions",
                     "managedBy", "manualSelector", "maxFailedIndexes", "parallelism", "podFailurePolicy",
                     "podReplacementPolicy", "selector", "successPolicy", "suspend", "template", "ttlSecondsAfterFinished"}
            assert set(s) <= known, set(s) - known
            assert s["completionMode"] == "Indexed"
            json.loads(cm["data"]["pipeline.json"])
            rows = list(csv.DictReader(io.StringIO(cm["data"]["rows.csv"])))
            assert s["completions"] == len(rows), (s["completions"], len(rows))
            assert 0 <= s["maxFailedIndexes"] <= s["completions"]
            assert s["backoffLimitPerIndex"] >= 1
            assert s["podReplacementPolicy"] == "Failed"
            pod = s["template"]["spec"]
            assert pod["restartPolicy"] == "Never"
            (c,) = pod["containers"]
            rules = s["podFailurePolicy"]["rules"]
            assert len(rules) <= 20
            by_action = {}
            for r in rules:
                assert r["action"] in ("FailJob", "FailIndex", "Ignore", "Count"), r
                assert ("onExitCodes" in r) != ("onPodConditions" in r), r
                if "onExitCodes" in r:
                    e = r["onExitCodes"]
                    assert e["operator"] in ("In", "NotIn") and 0 not in e["values"] and e.get("containerName", c["name"]) == c["name"], r
                    by_action.setdefault(r["action"], set()).update(e["values"])
                else:
                    by_action.setdefault(r["action"], set()).update(p["type"] for p in r["onPodConditions"])
            assert rules[0] == {"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget"}]}, rules[0]
            assert by_action["FailIndex"] == {64, 65}, by_action
            assert by_action["Count"] == {75, 130}, by_action
            assert c["command"] + c["args"][:1] == ["clipflow", "batch"], c
            mounts = {m["name"]: m["mountPath"] for m in c["volumeMounts"]}
            volumes = {v["name"]: v for v in pod["volumes"]}
            config = [n for n, v in volumes.items() if v.get("configMap", {}).get("name") == cm["metadata"]["name"]]
            assert config and c["args"][1:] == [mounts[config[0]] + "/pipeline.json", "--rows", mounts[config[0]] + "/rows.csv"], c["args"]
            assert any("secretRef" in e for e in c["envFrom"]), c["envFrom"]
            print("ok")
            """
        let r = try Run.run(["python3", "-c", check, manifest], check: false)
        XCTAssertEqual(r.status, 0, r.stderr)
        XCTAssertEqual(r.out.trimmingCharacters(in: .whitespacesAndNewlines), "ok", r.stderr)
    }

    /// The Indexed Job's pod as Kubernetes runs it, here: the container's command and arguments
    /// from the manifest, the ConfigMap's files where the pod mounts them (a folder here),
    /// JOB_COMPLETION_INDEX=1 and the S3 settings the Secret would give. Pod 1 merges row 1 of the
    /// example rows, and only that row.
    func testKubernetesPodCommandMergesTheRowOfItsIndex() throws {
        let s3 = try SeaweedFS.start(buckets: ["clipflow"])
        defer { s3.stop() }
        let work = fx.scratch("batch-k8s-pod")
        let config = work.appendingPathComponent("config")
        let scratch = work.appendingPathComponent("scratch")
        try FileManager.default.createDirectory(at: scratch, withIntermediateDirectories: true)
        // The ConfigMap's files into `config`; prints the container's command line, one word a line.
        let extract = """
            import os, sys, yaml
            docs = {d["kind"]: d for d in yaml.safe_load_all(open(sys.argv[1])) if d}
            os.makedirs(sys.argv[2], exist_ok=True)
            for name, text in docs["ConfigMap"]["data"].items():
                open(os.path.join(sys.argv[2], name), "w").write(text)
            pod = docs["Job"]["spec"]["template"]["spec"]
            (c,) = pod["containers"]
            mount = next(m["mountPath"] for m in c["volumeMounts"] if m["readOnly"])
            print("\\n".join(w.replace(mount, sys.argv[2]) for w in c["command"] + c["args"]))
            """
        let words = try Run.run(["python3", "-c", extract, Self.kubernetesManifest.path, config.path]).out
            .split(separator: "\n").map(String.init)
        XCTAssertEqual(words.first, "clipflow")
        let rows = try String(contentsOf: config.appendingPathComponent("rows.csv"), encoding: .utf8)
        XCTAssertTrue(rows.contains("s3://clipflow/fragments/set-001,s3://clipflow/merged/set-001.mp4"), rows)
        // The example rows' fragments: fragments/set-000 and fragments/set-001 in bucket clipflow.
        _ = try makeFragmentSets(count: 2, on: s3, in: work)
        let run = try Run.run(
            [binary] + words.dropFirst(), env: s3.environment.merging(["JOB_COMPLETION_INDEX": "1", "TMPDIR": scratch.path]) { _, new in new },
            check: false)
        XCTAssertEqual(run.status, 0, run.stderr)
        XCTAssertEqual(try s3.keys(prefix: "merged/"), ["merged/set-001.mp4"])
        let local = work.appendingPathComponent("set-001.mp4")
        try s3.download(key: "merged/set-001.mp4", to: local)
        XCTAssertEqual(try Probe.videoFrames(local.path), Self.fragmentsPerSet * Self.framesPerFragment)
    }
}

extension String {
    /// Appends this text to the file at `url`.
    fileprivate func appendLine(to url: URL) throws {
        let handle = try FileHandle(forWritingTo: url)
        defer { try? handle.close() }
        try handle.seekToEnd()
        try handle.write(contentsOf: Data(utf8))
    }
}
