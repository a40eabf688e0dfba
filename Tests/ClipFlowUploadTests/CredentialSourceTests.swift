import XCTest
@testable import ClipFlowUpload

/// A credential source is written to the queue file: secrets written into it are refused, and
/// references to secrets (environment variables, files, placeholders) are kept.
final class CredentialSourceTests: XCTestCase {
    func testSecretsWrittenIntoACommandAreRefused() {
        let refused = [
            #"echo {"token":"s3cr3t"}"#,
            #"echo '{"AccessKeyId":"AKIA1","SecretAccessKey":"abc","SessionToken":"x"}'"#,
            #"echo "{\"token\":\"abc\"}""#,
            "my-helper --token abc",
            "my-helper --password=hunter2",
            "my-helper --secret-access-key wJalrX",
            "AWS_SECRET_ACCESS_KEY=abc my-helper",
            "curl -H 'Authorization: Bearer abcdef' https://x.invalid/creds",
            "echo wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY1"
        ]
        for c in refused {
            XCTAssertNotNil(literalSecret(inCommand: c), c)
            let p = CredentialSource(command: ["/bin/sh", "-c", c]).problems()
            XCTAssertEqual(p.first?.field, "credentials-command", c)
            XCTAssertFalse(p.first?.message.contains("s3cr3t") ?? true, "the message does not repeat the secret")
        }
    }

    func testReferencesToSecretsAreKept() {
        let kept = [
            "my-sts-helper --role uploader",
            "cat '/home/me/.config/clipflow/token.json'",
            #"printf '{"token":"%s"}' "$UPLOAD_TOKEN""#,
            #"echo "{\"token\":\"$TOKEN\"}""#,
            "my-helper --token \"$TOKEN\"",
            "my-helper --token-file /run/secrets/t --refresh --role x",
            "aws sts assume-role --role-arn arn:aws:iam::123456789012:role/uploader --role-session-name clipflow",
            "vault kv get -format=json secret/clipflow",
            "/usr/local/lib/clipflow-helpers/credentials-v2.sh --profile production"
        ]
        for c in kept {
            XCTAssertNil(literalSecret(inCommand: c), c)
            XCTAssertTrue(CredentialSource(command: ["/bin/sh", "-c", c]).problems().isEmpty, c)
        }
    }

    func testSecretsInACredentialsURLAreRefused() {
        XCTAssertNotNil(literalSecret(inURL: "https://app.example/creds?token=abc"))
        XCTAssertNotNil(literalSecret(inURL: "https://me:pw@app.example/creds"))
        XCTAssertNil(literalSecret(inURL: "https://app.example/creds?role=uploader"))
        XCTAssertEqual(CredentialSource(url: "https://app.example/creds?access_token=abc").problems().first?.field, "credentials-url")
    }

    func testSecretsInTheEndpointAreRefused() {
        for bad in ["https://me:pw@tus.example/files", "https://tus.example/files?token=abc"] {
            let p = UploadDestination(method: .tus, endpoint: bad).problems()
            XCTAssertEqual(p.first?.field, "endpoint", bad)
            XCTAssertFalse(p.first?.message.contains("pw@") ?? true, "the message does not repeat the password")
            XCTAssertFalse(p.first?.message.contains("abc") ?? true, "the message does not repeat the token")
        }
        XCTAssertTrue(UploadDestination(method: .tus, endpoint: "https://me@tus.example/files?lang=en").problems().isEmpty)
    }
}
