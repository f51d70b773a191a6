//! `cargo run -p orbit-definition --example check -- FILE...`: parses definitions and prints
//! every error, or the normalised document and hash.

fn main() {
    let mut failed = false;
    for path in std::env::args().skip(1) {
        let text = match std::fs::read_to_string(&path) {
            Ok(t) => t,
            Err(e) => {
                eprintln!("{path}: {e}");
                failed = true;
                continue;
            }
        };
        match orbit_definition::parse(&text) {
            Ok(d) => {
                let doc = orbit_definition::to_document(&d);
                println!("{path}: ok {}", d.hash);
                println!("{}", serde_json::to_string_pretty(&doc).unwrap_or_default());
            }
            Err(errors) => {
                failed = true;
                for e in errors.errors() {
                    println!("{path}: {} {e}", e.code);
                }
            }
        }
    }
    std::process::exit(i32::from(failed));
}
