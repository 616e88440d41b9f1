//! `tux3 graph TARGET -o FILE [--max-nodes N]`: draw the volume's disk
//! structure as Graphviz. The output format follows FILE's extension:
//! `.dot`/`.gv` write the dot text, `.svg`/`.png` pipe it through Graphviz's
//! `dot -Tsvg`/`-Tpng` (which must be installed).
//!
//! Calls [`tux3::open_path`] (read-only) and
//! [`tux3_tools::graph::graph`].

use super::image::image_error;
use super::CliError;
use clap::Args;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use tux3::open_path;
use tux3_tools::graph::graph;

/// Arguments of `tux3 graph`.
#[derive(Args, Debug)]
pub struct GraphArgs {
    /// Image file or block device holding the volume
    pub target: PathBuf,
    /// Output file: .dot (Graphviz text), .svg or .png (needs Graphviz's `dot`)
    #[arg(short = 'o', long = "output", value_name = "FILE")]
    pub output: PathBuf,
    /// Most nodes drawn; groups cut short end in one "… N more" node
    #[arg(long, value_name = "N", default_value_t = 200)]
    pub max_nodes: usize,
}

/// Whether `prog` is an executable file on `PATH` (as `command -v` finds it).
fn on_path(prog: &str) -> bool {
    use std::os::unix::fs::PermissionsExt;
    let Some(path) = std::env::var_os("PATH") else {
        return false;
    };
    std::env::split_paths(&path).any(|dir| {
        std::fs::metadata(dir.join(prog)).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
    })
}

/// Run `dot -T<format> -o <out>` on `text`.
fn render(text: &str, format: &str, out: &Path) -> Result<(), CliError> {
    let mut child = Command::new("dot")
        .arg(format!("-T{format}"))
        .arg("-o")
        .arg(out)
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| CliError::at("cannot run dot", e))?;
    if let Some(mut stdin) = child.stdin.take() {
        // A write error shows up as dot's failure below.
        let _ = stdin.write_all(text.as_bytes());
    }
    let done = child.wait_with_output().map_err(|e| CliError::at("dot", e))?;
    if !done.status.success() {
        let err = String::from_utf8_lossy(&done.stderr);
        return Err(CliError::new(format!(
            "dot failed ({}): {}",
            done.status,
            err.trim()
        )));
    }
    Ok(())
}

/// `tux3 graph`.
pub fn run(args: &GraphArgs) -> Result<u8, CliError> {
    let ext = args
        .output
        .extension()
        .map(|e| e.to_string_lossy().to_ascii_lowercase())
        .unwrap_or_default();
    let format = match ext.as_str() {
        "dot" | "gv" => None,
        "svg" | "png" => Some(ext.as_str()),
        _ => {
            return Err(CliError::new(format!(
                "{}: unknown output format; name the file .dot, .svg or .png",
                args.output.display()
            ))
            .with_exit(2))
        }
    };
    if format.is_some() && !on_path("dot") {
        return Err(CliError::new(format!(
            "writing .{ext} needs Graphviz's `dot`, which is not installed: install graphviz \
             (e.g. apt-get install graphviz) or write a .dot file"
        )));
    }
    let dev = open_path(&args.target, false).map_err(|e| image_error(&args.target, e))?;
    let text = graph(dev, args.max_nodes).map_err(|e| image_error(&args.target, e))?;
    match format {
        None => std::fs::write(&args.output, text).map_err(|e| CliError::at(args.output.display(), e))?,
        Some(f) => render(&text, f, &args.output)?,
    }
    Ok(0)
}
