//! The build pipeline shared by every command: prerequisites, pristine
//! source, prepared tree, configuration, kernel build.

use anyhow::Result;
use std::path::PathBuf;

use crate::kbuild::{self, Make, Outputs};
use crate::layout::Layout;
use crate::progress::{detail, phase};
use crate::{kconfig, prereq, source, tree};

/// Kernel config flavours: fragments applied on top of tinyconfig.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Flavour {
    /// ublk.config: the test guest.
    Default,
    /// ublk.config + debug.config: KASAN, lockdep, KFENCE, atomic-sleep checks.
    Debug,
}

impl Flavour {
    pub fn name(self) -> &'static str {
        match self {
            Flavour::Default => "default",
            Flavour::Debug => "debug",
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
    /// Config flavour; `debug` builds into its own output directory.
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

/// How to run make in the prepared tree, as `opts` ask.
pub fn make(layout: &Layout, opts: &KernelOpts) -> Make {
    Make {
        tree: layout.tree(),
        llvm: opts.llvm.clone(),
        jobs: opts
            .jobs
            .unwrap_or_else(|| std::thread::available_parallelism().map_or(2, |n| n.get())),
    }
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
    prereq::check_min_versions(&tree_dir, &opts.llvm)?;
    let make = make(layout, opts);
    let out = layout.build_dir(opts.flavour.name());
    let config_fp = kconfig::configure(&make, &out, &opts.flavour.fragment_paths(layout))?;
    let outputs = kbuild::build(&make, &out, &prepared.head, &config_fp)?;
    Ok(outputs)
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
