import Tracing

/// How `clipflow serve`'s spans (swift-distributed-tracing) make one trace per upload: the upload's
/// creation starts it (or joins the client's, from a W3C `traceparent` header), its context is kept
/// in the upload's row and then its job's row (`trace`), and every PATCH, every step on whichever
/// worker takes the job, each worker process and each publishing continue it. The spans go to the
/// tracer the program bootstrapped (`clipflow serve`: OTLP, when `OTEL_EXPORTER_OTLP_ENDPOINT` is
/// set); with none, no context is kept and a span costs a no-op.
enum ServeTracing {
    /// The W3C header the context travels in.
    static let header = "traceparent"

    /// `context` as a `traceparent` value to keep in a row; nil when no tracer is bootstrapped.
    static func carried(_ context: InstrumentationContext) -> String? {
        var carrier: [String: String] = [:]
        InstrumentationSystem.instrument.inject(context, into: &carrier, using: DictionaryInjector())
        return carrier[header]
    }

    /// The context a row's `trace` (or a request's `traceparent` header) carries; the top level
    /// when it carries none.
    static func context(carrying trace: String?) -> InstrumentationContext {
        var context = InstrumentationContext.topLevel
        if let trace { InstrumentationSystem.instrument.extract([header: trace], into: &context, using: DictionaryExtractor()) }
        return context
    }

    private struct DictionaryInjector: Injector {
        func inject(_ value: String, forKey key: String, into carrier: inout [String: String]) { carrier[key] = value }
    }

    private struct DictionaryExtractor: Extractor {
        func extract(key: String, from carrier: [String: String]) -> String? { carrier[key] }
    }
}
