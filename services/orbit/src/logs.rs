//! The process's log subscriber: stderr, filtered, with the OpenTelemetry layer.

/// Installs the log subscriber (once; later calls are ignored), with the OpenTelemetry
/// layer when traces are on (`TraceArgs::init` first).
pub fn init(filter: &str) {
    use tracing_subscriber::layer::SubscriberExt as _;
    use tracing_subscriber::util::SubscriberInitExt as _;
    let filter = tracing_subscriber::EnvFilter::try_new(filter)
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let _ = tracing_subscriber::registry()
        .with(filter)
        .with(tracing_subscriber::fmt::layer().with_writer(std::io::stderr))
        .with(orbit_telemetry::layer())
        .try_init();
}
