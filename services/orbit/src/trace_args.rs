//! `--otlp-endpoint` and `--trace-sample-ratio`: OpenTelemetry traces of every server
//! (`orbit dev` and the split services), off unless an endpoint is given.

use std::process::ExitCode;

/// Trace export (see docs/operations.md, "Traces").
#[derive(clap::Args, Debug, Clone)]
pub struct TraceArgs {
    /// OTLP/gRPC endpoint to export traces to (an OpenTelemetry collector, Jaeger); traces
    /// are off when unset. Example: --otlp-endpoint http://localhost:4317
    #[arg(long = "otlp-endpoint", env = "OTEL_EXPORTER_OTLP_ENDPOINT", value_name = "URL")]
    pub otlp_endpoint: Option<String>,
    /// Fraction of executions traced (0..=1), decided on the execution's trace id so every
    /// process agrees. Example: --trace-sample-ratio 0.01
    #[arg(
        long = "trace-sample-ratio",
        env = "OTEL_TRACES_SAMPLER_ARG",
        default_value_t = 1.0,
        value_name = "RATIO"
    )]
    pub trace_sample_ratio: f64,
}

impl TraceArgs {
    /// Turns traces on when configured (call before `logs::init`); keep the guard for
    /// the life of the process, its drop flushes the last spans.
    pub fn init(&self, service: &str) -> Result<Option<orbit_telemetry::Guard>, ExitCode> {
        let config = orbit_telemetry::TraceConfig {
            endpoint: self.otlp_endpoint.clone(),
            sample_ratio: self.trace_sample_ratio,
            service_name: service.to_string(),
        };
        orbit_telemetry::init(&config).map_err(|e| {
            eprintln!("error: {e}");
            ExitCode::from(2)
        })
    }
}
