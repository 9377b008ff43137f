//! The build pipeline shared by every command: prerequisites, pristine
//! source, prepared tree, configuration, kernel build.

use anyhow::Result;
use std::path::PathBuf;

use crate::kbuild::{self, Make, Outputs};
use crate::layout::Layout;
use crate::progress::{detail, phase};
use crate::toolchain::{self, RustToolchain};
use crate::{kconfig, prereq, source, tree};

/// Kernel config flavours: fragments applied on top of tinyconfig.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Flavour {
    /// ublk.config: the test guest.
    Default,
    /// ublk.config + debug.config: KASAN, lockdep, KFENCE, atomic-sleep checks.
    Debug,
    /// ublk.config + inline-helpers.config: rust/helpers/ inlined into the
    /// Rust code (CONFIG_RUST_INLINE_HELPERS), built with the pinned rustc
    /// whose LLVM matches clang's.
    InlineHelpers,
}

impl Flavour {
    pub fn name(self) -> &'static str {
        match self {
            Flavour::Default => "default",
            Flavour::Debug => "debug",
            Flavour::InlineHelpers => "inline-helpers",
        }
    }

    /// The rustup toolchain this flavour builds with, if not the default
    /// rustc on PATH.
    pub fn rust_toolchain(self) -> Option<&'static str> {
        match self {
            Flavour::Default | Flavour::Debug => None,
            Flavour::InlineHelpers => Some(toolchain::INLINE_HELPERS_RUST),
        }
    }

    /// The config fragment files of this flavour, in the order applied.
    pub fn fragment_paths(self, layout: &Layout) -> Vec<PathBuf> {
        self.fragments()
            .iter()
            .map(|f| layout.config_fragment(f))
            .collect()
    }

    fn fragments(self) -> &'static [&'static str] {
        match self {
            Flavour::Default => &["ublk"],
            Flavour::Debug => &["ublk", "debug"],
            Flavour::InlineHelpers => &["ublk", "inline-helpers"],
        }
    }
}

/// Where the kernel source and the prepared tree are: what every command
/// that prepares the tree takes, building or not.
#[derive(Clone, Debug, clap::Args)]
pub struct TreeOpts {
    /// Use this 7.3+ kernel tree instead of Debian's linux-source-7.3 (it is
    /// copied, never modified).
    #[arg(long, value_name = "DIR")]
    pub kernel_src: Option<PathBuf>,
    /// Work directory for the prepared tree and builds (default target/kernel,
    /// or $UBLK_XTASK_WORK).
    #[arg(long, value_name = "DIR")]
    pub work_dir: Option<PathBuf>,
}

impl TreeOpts {
    /// Where the pristine source comes from.
    pub fn origin(&self) -> source::Origin {
        match &self.kernel_src {
            Some(d) => source::Origin::Dir(d.clone()),
            None => source::Origin::Debian,
        }
    }
}

/// What the commands that build the kernel take.
#[derive(Clone, Debug, clap::Args)]
pub struct KernelOpts {
    #[command(flatten)]
    pub tree: TreeOpts,
    /// Config flavour; each but `default` builds into its own output
    /// directory; `inline-helpers` builds with a pinned rustc (installed with
    /// rustup if missing).
    #[arg(long = "config", value_enum, default_value = "default")]
    pub flavour: Flavour,
    /// Value for make's LLVM= (clang/lld suffix).
    #[arg(long, default_value = "-19")]
    pub llvm: String,
    /// Parallel make jobs (default: all cores).
    #[arg(long, short = 'j')]
    pub jobs: Option<usize>,
}

pub fn layout(opts: &KernelOpts) -> Result<Layout> {
    Layout::discover(opts.tree.work_dir.clone())
}

/// How to run make in the prepared tree, as `opts` ask; installs the
/// flavour's Rust toolchain if it has one and it is missing.
pub fn make(layout: &Layout, opts: &KernelOpts) -> Result<Make> {
    let rust = opts
        .flavour
        .rust_toolchain()
        .map(toolchain::ensure)
        .transpose()?;
    Ok(Make {
        tree: layout.tree(),
        llvm: opts.llvm.clone(),
        jobs: opts
            .jobs
            .unwrap_or_else(|| std::thread::available_parallelism().map_or(2, |n| n.get())),
        rust,
    })
}

/// The prepared tree (pristine source + `patches/` + overlay), with no
/// configuration and no build: what reading the test list needs.
pub fn ensure_tree(layout: &Layout, opts: &TreeOpts) -> Result<tree::Prepared> {
    let base = source::ensure_base(layout, &opts.origin())?;
    phase(format!("kernel source: {base}"));
    tree::prepare(layout)
}

pub fn ensure_kernel(layout: &Layout, opts: &KernelOpts) -> Result<Outputs> {
    prereq::ensure()?;
    let prepared = ensure_tree(layout, &opts.tree)?;
    let tree_dir = layout.tree();
    let make = make(layout, opts)?;
    let rustc = make.rust.as_ref().map(|t| t.rustc.clone());
    prereq::check_min_versions(&tree_dir, &opts.llvm, rustc.as_deref())?;
    if let Some(t) = &make.rust {
        check_toolchain(&make, t)?;
    }
    let out = layout.build_dir(opts.flavour.name());
    let fragments = opts.flavour.fragment_paths(layout);
    let config_fp = kconfig::configure(&make, &out, &fragments)?;
    let outputs = kbuild::build(&make, &out, &prepared.head, &config_fp)?;
    kconfig::verify_built(&out, &fragments)?;
    Ok(outputs)
}

/// A pinned toolchain must use clang's LLVM and satisfy `make rustavailable`
/// (rust-src, bindgen) before the tree is configured with it.
fn check_toolchain(make: &Make, t: &RustToolchain) -> Result<()> {
    phase(format!("Rust toolchain {} for this flavour", t.name));
    toolchain::check_llvm_match(&t.rustc, &format!("clang{}", make.llvm))?;
    let scratch = std::env::temp_dir().join(format!("xtask-rustavailable-{}", std::process::id()));
    std::fs::create_dir_all(&scratch)?;
    let r = make.run_quiet(&scratch, &["rustavailable"]);
    let _ = std::fs::remove_dir_all(&scratch);
    r.map_err(|e| e.context(format!("`make rustavailable` with Rust {}", t.name)))
}

pub fn summary(o: &Outputs) {
    let size = std::fs::metadata(&o.bzimage).map(|m| m.len()).unwrap_or(0);
    phase(format!("kernel {} ready", o.release));
    detail(format!(
        "bzImage  {} ({:.1} MiB)",
        o.bzimage.display(),
        size as f64 / 1048576.0
    ));
    detail(format!("headers  {}", o.headers.display()));
    for m in o.modules() {
        detail(format!("module   {}", m.display()));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::ValueEnum;

    #[test]
    fn inline_helpers_flavour() {
        let f = Flavour::from_str("inline-helpers", false).unwrap();
        assert_eq!(f, Flavour::InlineHelpers);
        assert_eq!(f.name(), "inline-helpers");
        assert_eq!(f.fragments(), ["ublk", "inline-helpers"]);
        assert_eq!(f.rust_toolchain(), Some("1.86.0"));
        // The existing flavours keep the rustc on PATH and their fragments.
        assert_eq!(Flavour::Default.rust_toolchain(), None);
        assert_eq!(Flavour::Debug.rust_toolchain(), None);
        assert_eq!(Flavour::Default.fragments(), ["ublk"]);
        assert_eq!(Flavour::Debug.fragments(), ["ublk", "debug"]);
    }

    #[test]
    fn every_fragment_exists() {
        let configs = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("configs");
        for f in Flavour::value_variants() {
            for frag in f.fragments() {
                let p = configs.join(format!("{frag}.config"));
                assert!(p.is_file(), "{}: {} missing", f.name(), p.display());
            }
        }
    }
}
