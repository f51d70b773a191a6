//! The console's files, compiled into the binary (`services/console/assets/`): one HTML
//! shell, one stylesheet, and small ES modules, one per page. Nothing is fetched from
//! elsewhere at run time and nothing is built: edit a file and rebuild the binary.

/// The HTML shell every page path answers.
pub const INDEX: &str = include_str!("../assets/index.html");

/// Every file under `/ui/assets/`: name, content type, bytes.
const FILES: &[(&str, &str, &str)] = &[
    ("app.css", "text/css; charset=utf-8", include_str!("../assets/app.css")),
    ("app.js", "text/javascript; charset=utf-8", include_str!("../assets/app.js")),
    ("api.js", "text/javascript; charset=utf-8", include_str!("../assets/api.js")),
    ("executions.js", "text/javascript; charset=utf-8", include_str!("../assets/executions.js")),
    ("execution.js", "text/javascript; charset=utf-8", include_str!("../assets/execution.js")),
    ("evolve.js", "text/javascript; charset=utf-8", include_str!("../assets/evolve.js")),
    ("gantt.js", "text/javascript; charset=utf-8", include_str!("../assets/gantt.js")),
    ("pages.js", "text/javascript; charset=utf-8", include_str!("../assets/pages.js")),
    ("batches.js", "text/javascript; charset=utf-8", include_str!("../assets/batches.js")),
    ("batchform.js", "text/javascript; charset=utf-8", include_str!("../assets/batchform.js")),
    ("scrubber.js", "text/javascript; charset=utf-8", include_str!("../assets/scrubber.js")),
    ("querybar.js", "text/javascript; charset=utf-8", include_str!("../assets/querybar.js")),
    ("ratelimits.js", "text/javascript; charset=utf-8", include_str!("../assets/ratelimits.js")),
    ("tree.js", "text/javascript; charset=utf-8", include_str!("../assets/tree.js")),
    ("units.js", "text/javascript; charset=utf-8", include_str!("../assets/units.js")),
];

/// The content type and bytes of asset `name`.
#[must_use]
pub fn get(name: &str) -> Option<(&'static str, &'static [u8])> {
    FILES.iter().find(|(n, _, _)| *n == name).map(|(_, t, body)| (*t, body.as_bytes()))
}

#[cfg(test)]
mod tests {
    use super::{get, FILES, INDEX};

    /// Every module a page imports and every file the shell links is served: a new file
    /// left out of `FILES` would only show as a blank page in a browser.
    #[test]
    fn every_referenced_asset_is_served() {
        let mut referenced = Vec::new();
        for (name, _, body) in FILES {
            for part in body.split("from './").skip(1) {
                referenced.push((*name, part.split('\'').next().unwrap_or_default()));
            }
        }
        for part in INDEX.split("/ui/assets/").skip(1) {
            referenced.push(("index.html", part.split('"').next().unwrap_or_default()));
        }
        assert!(referenced.len() >= 8, "{referenced:?}");
        for (from, file) in referenced {
            assert!(get(file).is_some(), "{from} references {file}, which is not served");
        }
        assert!(get("../src/lib.rs").is_none());
    }
}
