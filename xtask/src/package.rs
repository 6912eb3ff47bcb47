//! `cargo xtask package [--debug]`: an installable tree of the extension for the system
//! PostgreSQL 15 (`cargo pgrx package`), checked before it is reported: the shared library,
//! the control file, and an install script with the objects of the committed one.
//!
//! The tree mirrors the server's own folders (`pg_config --pkglibdir` and `--sharedir`), so
//! installing on a server without Rust is copying it over `/` (README.md, "Installing").

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::setup::{self, PG15_CONFIG};
use crate::shell::{cargo, exec, root};
use crate::sql;

fn pg_config(arg: &str) -> Result<PathBuf, String> {
    let out = Command::new(PG15_CONFIG)
        .arg(arg)
        .output()
        .map_err(|e| format!("{PG15_CONFIG} {arg}: {e}"))?;
    Ok(PathBuf::from(String::from_utf8_lossy(&out.stdout).trim()))
}

/// `tree` + an absolute server path.
fn inside(tree: &Path, server_path: &Path) -> PathBuf {
    tree.join(server_path.strip_prefix("/").unwrap_or(server_path))
}

/// Builds the package (release unless `debug`) into `target/package/pg15` and checks it.
pub fn run(debug: bool) -> Result<PathBuf, String> {
    setup::pgrx(&[])?;
    let tree = root().join("target").join("package").join("pg15");
    let _ = std::fs::remove_dir_all(&tree);
    let mut c = cargo();
    c.current_dir(root().join("crates").join("pg-trickle-ext"))
        .args(["pgrx", "package", "--pg-config", PG15_CONFIG, "--out-dir"])
        .arg(&tree);
    if debug {
        c.arg("--debug");
    }
    exec(&mut c)?;
    let lib = inside(&tree, &pg_config("--pkglibdir")?).join("pg_trickle_ext.so");
    let ext = inside(&tree, &pg_config("--sharedir")?).join("extension");
    let version = sql::version()?;
    let script = ext.join(format!("pg_trickle_ext--{version}.sql"));
    for needed in [&lib, &ext.join("pg_trickle_ext.control"), &script] {
        if !needed.is_file() {
            return Err(format!("the package lacks {}", needed.display()));
        }
    }
    let packaged =
        std::fs::read_to_string(&script).map_err(|e| format!("{}: {e}", script.display()))?;
    let committed = std::fs::read_to_string(sql::script_path(&version))
        .map_err(|e| format!("the committed install script: {e}"))?;
    if sql::objects(&packaged) != sql::objects(&committed) {
        return Err(format!(
            "{} differs from the committed install script: run `cargo xtask sql`",
            script.display()
        ));
    }
    println!(
        "\npackage: {}\n  {}\n  {}\nInstall on a PostgreSQL 15 server of the same build (no Rust needed):\n  \
         sudo cp -r {}/* /\n  psql -c 'CREATE EXTENSION pg_trickle_ext'",
        tree.display(),
        lib.display(),
        script.display(),
        tree.display()
    );
    Ok(tree)
}
