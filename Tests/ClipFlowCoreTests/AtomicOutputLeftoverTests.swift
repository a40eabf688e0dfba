import XCTest
import Foundation
@testable import ClipFlowCore
import ClipFlowTestSupport
#if canImport(Glibc)
    import Glibc
#endif

/// Temporaries of writers that died are removed by the next writer into the folder; a live
/// writer's (in this process or another) never are.
final class AtomicOutputLeftoverTests: XCTestCase {
    let fx = Fixtures.shared

    private func names(_ dir: URL) -> [String] {
        ((try? FileManager.default.contentsOfDirectory(atPath: dir.path)) ?? []).sorted()
    }

    private func touch(_ dir: URL, _ name: String, bytes: Int = 16) {
        XCTAssertTrue(FileManager.default.createFile(atPath: dir.appendingPathComponent(name).path, contents: Data(count: bytes)))
    }

    func testDeadWritersTemporaryIsRemovedByTheNextWriterIntoTheFolder() throws {
        let dir = fx.scratch("atomic-dead")
        // Left by a writer killed mid-write: nobody holds its lock.
        touch(dir, ".merged.mp4.clipflow-tmp-4242-123456", bytes: 1 << 20)
        touch(dir, ".clip-0003.mp4.clipflow-tmp-1-9")
        let out = try AtomicOutput(target: dir.appendingPathComponent("out.mp4"), replacing: false)
        XCTAssertEqual(names(dir), [out.temporary.lastPathComponent])
        try out.write(Data("done".utf8))
        try out.commit()
        XCTAssertEqual(names(dir), ["out.mp4"])
        XCTAssertEqual(try String(contentsOf: dir.appendingPathComponent("out.mp4"), encoding: .utf8), "done")
    }

    func testLiveWritersTemporaryInThisProcessIsKept() throws {
        let dir = fx.scratch("atomic-live-here")
        let live = try AtomicOutput(target: dir.appendingPathComponent("a.mp4"), replacing: false)
        XCTAssertTrue(FileManager.default.fileExists(atPath: live.temporary.path), "created at once, locked")
        XCTAssertEqual(LeftoverTemporaries.remove(in: dir.path), [])
        let other = try AtomicOutput(target: dir.appendingPathComponent("b.mp4"), replacing: false)
        XCTAssertEqual(names(dir), [live.temporary.lastPathComponent, other.temporary.lastPathComponent].sorted())
        live.discard()
        other.discard()
        XCTAssertEqual(names(dir), [])
    }

    /// Another process holding the lock on a temporary (as a live writer does, whatever its PID)
    /// keeps it; once that process is gone, the temporary goes.
    func testLiveWritersTemporaryInAnotherProcessIsKeptUntilItDies() throws {
        let dir = fx.scratch("atomic-live-there")
        let name = ".x.mp4.clipflow-tmp-77-88"
        touch(dir, name)
        let holder = Process()
        // flock(1) without forking: the process holding the lock is the one killed below.
        holder.executableURL = URL(fileURLWithPath: "/usr/bin/flock")
        holder.arguments = ["--shared", "--no-fork", dir.appendingPathComponent(name).path, "sleep", "30"]
        try holder.run()
        defer { if holder.isRunning { holder.terminate() } }
        // Wait until it holds the lock: our exclusive try fails then.
        let deadline = Date().addingTimeInterval(5)
        while Date() < deadline {
            let fd = open(dir.appendingPathComponent(name).path, O_RDONLY)
            let held = flock(fd, LOCK_EX | LOCK_NB) != 0
            close(fd)
            if held { break }
            usleep(10_000)
        }
        XCTAssertEqual(LeftoverTemporaries.remove(in: dir.path), [])
        XCTAssertEqual(names(dir), [name])
        kill(holder.processIdentifier, SIGKILL)
        holder.waitUntilExit()
        XCTAssertEqual(LeftoverTemporaries.remove(in: dir.path), [name])
        XCTAssertEqual(names(dir), [])
    }

    /// Only regular files and folders named exactly as temporaries are touched: not the targets,
    /// not names that merely look alike, not symlinks (whose targets stay untouched).
    func testOnlyTemporaryFilesAreRemoved() throws {
        let dir = fx.scratch("atomic-names")
        let keep = [
            ".clipflow-tmp-1-2", ".x.mp4.clipflow-tmp-1", ".x.mp4.clipflow-tmp-a-2", "x.mp4.clipflow-tmp-1-2",
            ".x.mp4.clipflow-tmp-1-2-3", "out.mp4", ".hidden"
        ]
        for n in keep { touch(dir, n) }
        try FileManager.default.createDirectory(at: dir.appendingPathComponent(".d.clipflow-tmp-1-2"), withIntermediateDirectories: false)
        let victim = fx.scratch("atomic-names-target").appendingPathComponent("precious.mp4")
        XCTAssertTrue(FileManager.default.createFile(atPath: victim.path, contents: Data("keep".utf8)))
        try FileManager.default.createSymbolicLink(atPath: dir.appendingPathComponent(".l.mp4.clipflow-tmp-3-4").path, withDestinationPath: victim.path)
        touch(dir, ".y.mp4.clipflow-tmp-12-34")
        XCTAssertEqual(LeftoverTemporaries.remove(in: dir.path).sorted(), [".d.clipflow-tmp-1-2", ".y.mp4.clipflow-tmp-12-34"])
        XCTAssertEqual(names(dir), (keep + [".l.mp4.clipflow-tmp-3-4"]).sorted())
        XCTAssertEqual(try String(contentsOf: victim, encoding: .utf8), "keep")
    }

    /// A hard-linked temporary (the directory stage's link mode) is locked too, and commits.
    func testHardLinkedTemporaryIsLockedAndCommits() throws {
        let dir = fx.scratch("atomic-link")
        let src = fx.scratch("atomic-link-src").appendingPathComponent("in.mp4")
        XCTAssertTrue(FileManager.default.createFile(atPath: src.path, contents: Data("video".utf8)))
        let out = try XCTUnwrap(try AtomicOutput.hardLink(from: src.path, target: dir.appendingPathComponent("in.mp4"), replacing: false))
        XCTAssertEqual(LeftoverTemporaries.remove(in: dir.path), [])
        try out.commit()
        var a = stat(), b = stat()
        XCTAssertEqual(stat(src.path, &a), 0)
        XCTAssertEqual(stat(dir.appendingPathComponent("in.mp4").path, &b), 0)
        XCTAssertEqual(a.st_ino, b.st_ino, "a link, not a copy")
        XCTAssertEqual(names(dir), ["in.mp4"])
        XCTAssertNil(try AtomicOutput.hardLink(from: "/nonexistent-clipflow/x", target: dir.appendingPathComponent("y.mp4"), replacing: false))
        // A symlink cannot be linked and locked as a file: nil (the caller copies), nothing left.
        let symlink = fx.scratch("atomic-link-sym").appendingPathComponent("s.mp4")
        try FileManager.default.createSymbolicLink(atPath: symlink.path, withDestinationPath: src.path)
        XCTAssertNil(try AtomicOutput.hardLink(from: symlink.path, target: dir.appendingPathComponent("s.mp4"), replacing: false))
        XCTAssertEqual(names(dir), ["in.mp4"])
    }

    /// A temporary folder (an HLS ladder's) is locked as a file is: kept while its writer lives,
    /// removed with everything in it once the writer is gone, renamed into place by `commit`.
    func testTemporaryFoldersAreLockedSweptAndCommitted() throws {
        let dir = fx.scratch("atomic-folder")
        // Left by a writer killed mid-write: a folder with files and a subfolder, nobody's lock.
        let dead = dir.appendingPathComponent(".ladder.clipflow-tmp-4242-7")
        try FileManager.default.createDirectory(at: dead.appendingPathComponent("360p"), withIntermediateDirectories: true)
        touch(dead.appendingPathComponent("360p"), "seg-0.m4s")
        let live = try AtomicOutput(folder: dir.appendingPathComponent("ladder"), replacing: false)
        XCTAssertEqual(names(dir), [live.temporary.lastPathComponent], "the dead writer's folder went when the next writer came")
        touch(live.temporary, "master.m3u8")
        XCTAssertEqual(LeftoverTemporaries.remove(in: dir.path), [], "a live writer's folder is kept")
        try live.commit()
        XCTAssertEqual(names(dir), ["ladder"])
        XCTAssertEqual(names(dir.appendingPathComponent("ladder")), ["master.m3u8"])
        XCTAssertThrowsError(try AtomicOutput(folder: dir.appendingPathComponent("ladder"), replacing: false)) {
            XCTAssertTrue("\($0)".contains("exists"), "\($0)")
        }
        let discarded = try AtomicOutput(folder: dir.appendingPathComponent("other"), replacing: false)
        touch(discarded.temporary, "x")
        discarded.discard()
        XCTAssertEqual(names(dir), ["ladder"])
    }

    func testDiscardAndDeinitRemoveTheTemporary() throws {
        let dir = fx.scratch("atomic-discard")
        do { _ = try AtomicOutput(target: dir.appendingPathComponent("a.mp4"), replacing: false) }
        XCTAssertEqual(names(dir), [])
        XCTAssertThrowsError(try AtomicOutput(target: dir.appendingPathComponent("missing/a.mp4"), replacing: false)) {
            XCTAssertTrue("\($0)".contains("does not exist"), "\($0)")
        }
    }

    /// On network and FUSE filesystems locks may be per machine: a live writer elsewhere would
    /// look dead, so there the sweep also waits for an hour without writes.
    func testNetworkFilesystemsAreRecognisedFromTheMountTable() {
        let mounts = """
            /dev/vda1 / ext4 rw 0 0
            tmpfs /tmp tmpfs rw 0 0
            srv:/export /mnt/nas nfs4 rw 0 0
            //srv/share /mnt/my\\040share cifs rw 0 0
            sshfs#me@h: /home/me/remote fuse.sshfs rw 0 0
            """
        XCTAssertEqual(LeftoverTemporaries.filesystemType(of: "/mnt/nas/videos", mounts: mounts), "nfs4")
        XCTAssertEqual(LeftoverTemporaries.filesystemType(of: "/mnt/nasty", mounts: mounts), "ext4")
        XCTAssertEqual(LeftoverTemporaries.filesystemType(of: "/mnt/my share/x", mounts: mounts), "cifs")
        XCTAssertEqual(LeftoverTemporaries.filesystemType(of: "/home/me/remote/a", mounts: mounts), "fuse.sshfs")
        XCTAssertEqual(LeftoverTemporaries.filesystemType(of: "/tmp", mounts: mounts), "tmpfs")
        XCTAssertTrue(LeftoverTemporaries.locksAreLocal(fx.scratch("atomic-local").path), "the test scratch folder is local")
    }
}
