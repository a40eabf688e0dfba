import Foundation

extension UploadDestination {
    /// The uploader for this destination.
    public func makeUploader(store: ResumeStore) throws -> FileUploader {
        throw UploadError(code: "failure", message: "\(method.rawValue) uploads are not wired yet")
    }
}
