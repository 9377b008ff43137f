//! Checks the Rust definitions of `ublk-uapi` against the real C header.
//!
//! One Rust table (built by the `consts!`, `structs!` and `helpers!` macros
//! below) lists every constant, struct, field and inline helper together
//! with the Rust value / layout. From it a small C program is generated,
//! compiled with `cc` against the kernel header and run; its output is
//! compared with the Rust side. In addition the header text is scanned so
//! that any `UBLK*` macro, struct, struct field or inline helper that the
//! table does not cover makes the test fail.
//!
//! Header location: `$UBLK_UAPI_HEADER`, or
//! `<workspace>/target/kernel/linux/include/uapi/linux/ublk_cmd.h`.
//! C compiler: `$CC`, or `cc`.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::mem::{align_of, offset_of, size_of};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{SystemTime, UNIX_EPOCH};

use ublk_uapi::*;

// ---------------------------------------------------------------------------
// The table.
// ---------------------------------------------------------------------------

struct ConstEntry {
    name: &'static str,
    value: i128,
    /// Not (necessarily) in the header: project additions pending upstream.
    optional: bool,
}

/// `NAME, ...`; `#[optional] NAME` marks a constant the header may lack.
macro_rules! consts {
    (@one #[optional] $name:ident) => {
        ConstEntry { name: stringify!($name), value: $name as i128, optional: true }
    };
    (@one $name:ident) => {
        ConstEntry { name: stringify!($name), value: $name as i128, optional: false }
    };
    ($($(#[$attr:ident])? $name:ident),* $(,)?) => {
        vec![$(consts!(@one $(#[$attr])? $name)),*]
    };
}

/// Maps a Rust field type to the C type the header must use for it.
trait CType {
    fn c_type() -> String;
}

macro_rules! scalar_ctype {
    ($($t:ty => $c:literal),* $(,)?) => {
        $(impl CType for $t { fn c_type() -> String { $c.to_string() } })*
    };
}

scalar_ctype! {
    u8 => "__u8", u16 => "__u16", u32 => "__u32", u64 => "__u64",
    i8 => "__s8", i16 => "__s16", i32 => "__s32", i64 => "__s64",
}

impl<T: CType, const N: usize> CType for [T; N] {
    fn c_type() -> String {
        format!("{}[{}]", T::c_type(), N)
    }
}

struct FieldEntry {
    /// Field name in C.
    c_name: &'static str,
    /// Rust field implementing it (differs for union aliases).
    rust_name: &'static str,
    offset: usize,
    size: usize,
    c_type: String,
}

struct StructEntry {
    c_name: &'static str,
    rust_name: &'static str,
    size: usize,
    align: usize,
    fields: Vec<FieldEntry>,
}

fn field_size<T, F>(_: impl Fn(&T) -> &F) -> usize {
    size_of::<F>()
}

fn field_ctype<T, F: CType>(_: impl Fn(&T) -> &F) -> String {
    F::c_type()
}

macro_rules! field_entry {
    ($ty:ty, $cf:ident) => {
        field_entry!($ty, $cf = $cf)
    };
    ($ty:ty, $cf:ident = $rf:ident) => {
        FieldEntry {
            c_name: stringify!($cf),
            rust_name: stringify!($rf),
            offset: offset_of!($ty, $rf),
            size: field_size(|s: &$ty| &s.$rf),
            c_type: field_ctype(|s: &$ty| &s.$rf),
        }
    };
}

/// `RustType = c_name { c_field, c_alias = rust_field, ... }`; defines
/// `fn struct_table()`.
macro_rules! structs {
    ($($ty:ident = $cname:ident { $($cf:ident $(= $rf:ident)?),* $(,)? }),* $(,)?) => {
        $(
            impl CType for $ty {
                fn c_type() -> String {
                    concat!("struct ", stringify!($cname)).to_string()
                }
            }
        )*
        fn struct_table() -> Vec<StructEntry> {
            vec![$(
                StructEntry {
                    c_name: stringify!($cname),
                    rust_name: stringify!($ty),
                    size: size_of::<$ty>(),
                    align: align_of::<$ty>(),
                    fields: vec![$(field_entry!($ty, $cf $(= $rf)?)),*],
                }
            ),*]
        }
    };
}

struct HelperCheck {
    /// `c_function` or `c_function.member` for struct results.
    label: &'static str,
    /// C function body computing an `unsigned long long` from `v`.
    c_body: &'static str,
    rust: fn(u64) -> u64,
}

macro_rules! helpers {
    ($($label:literal: $c_body:literal => $rust:expr),* $(,)?) => {
        vec![$(HelperCheck { label: $label, c_body: $c_body, rust: $rust }),*]
    };
}

/// Constants of this crate that intentionally have no header counterpart.
const RUST_ONLY_CONSTS: &[&str] = &["UBLK_IOC_TYPE"];

fn const_table() -> Vec<ConstEntry> {
    consts![
        UBLK_CMD_GET_QUEUE_AFFINITY,
        UBLK_CMD_GET_DEV_INFO,
        UBLK_CMD_ADD_DEV,
        UBLK_CMD_DEL_DEV,
        UBLK_CMD_START_DEV,
        UBLK_CMD_STOP_DEV,
        UBLK_CMD_SET_PARAMS,
        UBLK_CMD_GET_PARAMS,
        UBLK_CMD_START_USER_RECOVERY,
        UBLK_CMD_END_USER_RECOVERY,
        UBLK_CMD_GET_DEV_INFO2,
        UBLK_U_CMD_GET_QUEUE_AFFINITY,
        UBLK_U_CMD_GET_DEV_INFO,
        UBLK_U_CMD_ADD_DEV,
        UBLK_U_CMD_DEL_DEV,
        UBLK_U_CMD_START_DEV,
        UBLK_U_CMD_STOP_DEV,
        UBLK_U_CMD_SET_PARAMS,
        UBLK_U_CMD_GET_PARAMS,
        UBLK_U_CMD_START_USER_RECOVERY,
        UBLK_U_CMD_END_USER_RECOVERY,
        UBLK_U_CMD_GET_DEV_INFO2,
        UBLK_U_CMD_GET_FEATURES,
        UBLK_U_CMD_DEL_DEV_ASYNC,
        UBLK_U_CMD_UPDATE_SIZE,
        UBLK_U_CMD_QUIESCE_DEV,
        UBLK_U_CMD_TRY_STOP_DEV,
        UBLK_U_CMD_REG_BUF,
        UBLK_U_CMD_UNREG_BUF,
        UBLK_SHMEM_BUF_READ_ONLY,
        UBLK_FEATURES_LEN,
        UBLK_IO_FETCH_REQ,
        UBLK_IO_COMMIT_AND_FETCH_REQ,
        UBLK_IO_NEED_GET_DATA,
        UBLK_U_IO_FETCH_REQ,
        UBLK_U_IO_COMMIT_AND_FETCH_REQ,
        UBLK_U_IO_NEED_GET_DATA,
        UBLK_U_IO_REGISTER_IO_BUF,
        UBLK_U_IO_UNREGISTER_IO_BUF,
        UBLK_U_IO_PREP_IO_CMDS,
        UBLK_U_IO_COMMIT_IO_CMDS,
        UBLK_U_IO_FETCH_IO_CMDS,
        UBLK_IO_RES_OK,
        UBLK_IO_RES_NEED_GET_DATA,
        UBLK_IO_RES_ABORT,
        UBLKSRV_CMD_BUF_OFFSET,
        UBLKSRV_IO_BUF_OFFSET,
        UBLK_MAX_QUEUE_DEPTH,
        UBLK_IO_BUF_OFF,
        UBLK_IO_BUF_BITS,
        UBLK_IO_BUF_BITS_MASK,
        UBLK_TAG_OFF,
        UBLK_TAG_BITS,
        UBLK_TAG_BITS_MASK,
        UBLK_QID_OFF,
        UBLK_QID_BITS,
        UBLK_QID_BITS_MASK,
        UBLK_MAX_NR_QUEUES,
        UBLKSRV_IO_BUF_TOTAL_BITS,
        UBLKSRV_IO_BUF_TOTAL_SIZE,
        UBLK_INTEGRITY_FLAG_OFF,
        UBLKSRV_IO_INTEGRITY_FLAG,
        UBLK_F_SUPPORT_ZERO_COPY,
        UBLK_F_URING_CMD_COMP_IN_TASK,
        UBLK_F_NEED_GET_DATA,
        UBLK_F_USER_RECOVERY,
        UBLK_F_USER_RECOVERY_REISSUE,
        UBLK_F_UNPRIVILEGED_DEV,
        UBLK_F_CMD_IOCTL_ENCODE,
        UBLK_F_USER_COPY,
        UBLK_F_ZONED,
        UBLK_F_USER_RECOVERY_FAIL_IO,
        UBLK_F_UPDATE_SIZE,
        UBLK_F_AUTO_BUF_REG,
        UBLK_F_QUIESCE,
        UBLK_F_PER_IO_DAEMON,
        UBLK_F_BUF_REG_OFF_DAEMON,
        UBLK_F_BATCH_IO,
        UBLK_F_INTEGRITY,
        UBLK_F_SAFE_STOP_DEV,
        UBLK_F_NO_AUTO_PART_SCAN,
        UBLK_F_SHMEM_ZC,
        UBLK_F_IO_DESC_SIZE,
        #[optional]
        UBLK_F_SUPPORT_RQ_AFFINITY,
        UBLK_S_DEV_DEAD,
        UBLK_S_DEV_LIVE,
        UBLK_S_DEV_QUIESCED,
        UBLK_S_DEV_FAIL_IO,
        UBLK_IO_OP_READ,
        UBLK_IO_OP_WRITE,
        UBLK_IO_OP_FLUSH,
        UBLK_IO_OP_DISCARD,
        UBLK_IO_OP_WRITE_SAME,
        UBLK_IO_OP_WRITE_ZEROES,
        UBLK_IO_OP_ZONE_OPEN,
        UBLK_IO_OP_ZONE_CLOSE,
        UBLK_IO_OP_ZONE_FINISH,
        UBLK_IO_OP_ZONE_APPEND,
        UBLK_IO_OP_ZONE_RESET_ALL,
        UBLK_IO_OP_ZONE_RESET,
        UBLK_IO_OP_REPORT_ZONES,
        UBLK_IO_F_FAILFAST_DEV,
        UBLK_IO_F_FAILFAST_TRANSPORT,
        UBLK_IO_F_FAILFAST_DRIVER,
        UBLK_IO_F_META,
        UBLK_IO_F_FUA,
        UBLK_IO_F_NOUNMAP,
        UBLK_IO_F_SWAP,
        UBLK_IO_F_NEED_REG_BUF,
        UBLK_IO_F_INTEGRITY,
        UBLK_IO_F_SHMEM_ZC,
        UBLK_AUTO_BUF_REG_FALLBACK,
        UBLK_AUTO_BUF_REG_F_MASK,
        UBLK_BATCH_F_HAS_ZONE_LBA,
        UBLK_BATCH_F_HAS_BUF_ADDR,
        UBLK_BATCH_F_AUTO_BUF_REG_FALLBACK,
        UBLK_ATTR_READ_ONLY,
        UBLK_ATTR_ROTATIONAL,
        UBLK_ATTR_VOLATILE_CACHE,
        UBLK_ATTR_FUA,
        UBLK_MIN_SEGMENT_SIZE,
        UBLK_PARAM_TYPE_BASIC,
        UBLK_PARAM_TYPE_DISCARD,
        UBLK_PARAM_TYPE_DEVT,
        UBLK_PARAM_TYPE_ZONED,
        UBLK_PARAM_TYPE_DMA_ALIGN,
        UBLK_PARAM_TYPE_SEGMENT,
        UBLK_PARAM_TYPE_INTEGRITY,
        UBLK_SHMEM_ZC_OFF_MASK,
        UBLK_SHMEM_ZC_IDX_OFF,
        UBLK_SHMEM_ZC_IDX_MASK,
    ]
}

structs! {
    UblkShmemBufReg = ublk_shmem_buf_reg { addr, len, flags, reserved },
    UblksrvCtrlCmd = ublksrv_ctrl_cmd {
        dev_id, queue_id, len, addr, data, dev_path_len, pad, reserved,
    },
    UblksrvCtrlDevInfo = ublksrv_ctrl_dev_info {
        nr_hw_queues, queue_depth, state, io_desc_size, max_io_buf_bytes, dev_id,
        ublksrv_pid, pad1, flags, ublksrv_flags, owner_uid, owner_gid, reserved1,
        reserved2,
    },
    UblksrvIoDesc = ublksrv_io_desc {
        op_flags, nr_sectors, nr_zones = nr_sectors, start_sector, addr,
    },
    UblkAutoBufReg = ublk_auto_buf_reg { index, flags, reserved0, reserved1 },
    UblksrvIoCmd = ublksrv_io_cmd { q_id, tag, result, addr, zone_append_lba = addr },
    UblkElemHeader = ublk_elem_header { tag, buf_index, result },
    UblkBatchIo = ublk_batch_io { q_id, flags, nr_elem, elem_bytes, reserved, reserved2 },
    UblkParamBasic = ublk_param_basic {
        attrs, logical_bs_shift, physical_bs_shift, io_opt_shift, io_min_shift,
        max_sectors, chunk_sectors, dev_sectors, virt_boundary_mask,
    },
    UblkParamDiscard = ublk_param_discard {
        discard_alignment, discard_granularity, max_discard_sectors,
        max_write_zeroes_sectors, max_discard_segments, reserved0,
    },
    UblkParamDevt = ublk_param_devt { char_major, char_minor, disk_major, disk_minor },
    UblkParamZoned = ublk_param_zoned {
        max_open_zones, max_active_zones, max_zone_append_sectors, reserved,
    },
    UblkParamDmaAlign = ublk_param_dma_align { alignment, pad },
    UblkParamSegment = ublk_param_segment {
        seg_boundary_mask, max_segment_size, max_segments, pad,
    },
    UblkParamIntegrity = ublk_param_integrity {
        flags, max_integrity_segments, interval_exp, metadata_size, pi_offset,
        csum_type, tag_size, pad,
    },
    UblkParams = ublk_params {
        len, types, basic, discard, devt, zoned, dma, seg, integrity,
    },
}

fn helper_table() -> Vec<HelperCheck> {
    helpers![
        "ublksrv_get_op":
            "struct ublksrv_io_desc d = {0}; d.op_flags = (__u32)v; return ublksrv_get_op(&d);"
            => |v| ublksrv_get_op(&UblksrvIoDesc { op_flags: v as u32, ..Default::default() }) as u64,
        "ublksrv_get_flags":
            "struct ublksrv_io_desc d = {0}; d.op_flags = (__u32)v; return ublksrv_get_flags(&d);"
            => |v| ublksrv_get_flags(&UblksrvIoDesc { op_flags: v as u32, ..Default::default() }) as u64,
        "ublk_sqe_addr_to_auto_buf_reg.index":
            "return ublk_sqe_addr_to_auto_buf_reg(v).index;"
            => |v| ublk_sqe_addr_to_auto_buf_reg(v).index as u64,
        "ublk_sqe_addr_to_auto_buf_reg.flags":
            "return ublk_sqe_addr_to_auto_buf_reg(v).flags;"
            => |v| ublk_sqe_addr_to_auto_buf_reg(v).flags as u64,
        "ublk_sqe_addr_to_auto_buf_reg.reserved0":
            "return ublk_sqe_addr_to_auto_buf_reg(v).reserved0;"
            => |v| ublk_sqe_addr_to_auto_buf_reg(v).reserved0 as u64,
        "ublk_sqe_addr_to_auto_buf_reg.reserved1":
            "return ublk_sqe_addr_to_auto_buf_reg(v).reserved1;"
            => |v| ublk_sqe_addr_to_auto_buf_reg(v).reserved1 as u64,
        "ublk_auto_buf_reg_to_sqe_addr":
            "struct ublk_auto_buf_reg r = {0}; r.index = (__u16)v; r.flags = (__u8)(v >> 8); \
             r.reserved0 = (__u8)(v >> 40); r.reserved1 = (__u32)(v >> 16); \
             return ublk_auto_buf_reg_to_sqe_addr(&r);"
            => |v| ublk_auto_buf_reg_to_sqe_addr(&UblkAutoBufReg {
                index: v as u16,
                flags: (v >> 8) as u8,
                reserved0: (v >> 40) as u8,
                reserved1: (v >> 16) as u32,
            }),
        "ublk_shmem_zc_addr":
            "return ublk_shmem_zc_addr((__u16)(v >> 40), (__u32)v);"
            => |v| ublk_shmem_zc_addr((v >> 40) as u16, v as u32),
        "ublk_shmem_zc_index": "return ublk_shmem_zc_index(v);" => |v| ublk_shmem_zc_index(v) as u64,
        "ublk_shmem_zc_offset": "return ublk_shmem_zc_offset(v);" => |v| ublk_shmem_zc_offset(v) as u64,
    ]
}

const HELPER_SAMPLES: &[u64] = &[
    0,
    1,
    0xff,
    0x100,
    0xffff_ffff,
    0x1_0000_0000,
    0x0123_4567_89ab_cdef,
    0xfedc_ba98_7654_3210,
    0x8000_0000_0000_0000,
    u64::MAX,
];

// ---------------------------------------------------------------------------
// Header location and scanning.
// ---------------------------------------------------------------------------

fn workspace_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("uapi crate lives inside the workspace")
        .to_path_buf()
}

/// The header, and whether `UBLK_UAPI_HEADER` named it.
fn header_path() -> (PathBuf, bool) {
    match std::env::var_os("UBLK_UAPI_HEADER") {
        Some(p) if !p.is_empty() => (PathBuf::from(p), true),
        _ => (
            workspace_dir().join("target/kernel/linux/include/uapi/linux/ublk_cmd.h"),
            false,
        ),
    }
}

/// The header's path and text; `None` (after saying so) when it is the
/// default one and the kernel tree has not been prepared yet. A header
/// that `UBLK_UAPI_HEADER` names must be readable.
fn read_header() -> Option<(PathBuf, String)> {
    let (path, named) = header_path();
    match std::fs::read_to_string(&path) {
        Ok(text) => Some((path, text)),
        Err(e) if named => panic!(
            "ublk UAPI header {} (UBLK_UAPI_HEADER) not readable: {e}",
            path.display()
        ),
        Err(e) => {
            // Straight to stderr: the test harness would swallow an
            // eprintln! of a test that passes.
            use std::io::Write as _;
            let _ = writeln!(
                std::io::stderr(),
                "skipped: rust_definitions_match_header: no ublk UAPI header at {} ({e}): \
                 run `cargo xtask build-kernel` (or `cargo xtask selftest --list`) to prepare \
                 the kernel tree, or point UBLK_UAPI_HEADER at include/uapi/linux/ublk_cmd.h",
                path.display()
            );
            None
        }
    }
}

/// Removes `/* */` and `//` comments, keeping newlines.
fn strip_comments(src: &str) -> String {
    let mut out = String::with_capacity(src.len());
    let mut rest = src;
    loop {
        let block = rest.find("/*");
        let line = rest.find("//");
        match (block, line) {
            (Some(b), l) if l.is_none() || b < l.unwrap() => {
                out.push_str(&rest[..b]);
                let end = rest[b + 2..]
                    .find("*/")
                    .map(|e| b + 2 + e + 2)
                    .unwrap_or(rest.len());
                out.extend(rest[b..end].chars().filter(|&c| c == '\n'));
                rest = &rest[end..];
            }
            (_, Some(l)) => {
                out.push_str(&rest[..l]);
                let end = rest[l..].find('\n').map(|e| l + e).unwrap_or(rest.len());
                rest = &rest[end..];
            }
            _ => {
                out.push_str(rest);
                return out;
            }
        }
    }
}

fn is_ident_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_'
}

fn leading_ident(s: &str) -> &str {
    let end = s.find(|c: char| !is_ident_char(c)).unwrap_or(s.len());
    &s[..end]
}

fn trailing_ident(s: &str) -> &str {
    let start = s.rfind(|c: char| !is_ident_char(c)).map_or(0, |i| i + 1);
    &s[start..]
}

/// Preprocessor directives as (directive, rest-of-line).
fn directives(text: &str) -> Vec<(String, String)> {
    text.lines()
        .filter_map(|l| l.trim_start().strip_prefix('#'))
        .map(|d| {
            let d = d.trim_start();
            let name = leading_ident(d);
            (name.to_string(), d[name.len()..].to_string())
        })
        .collect()
}

struct HeaderMacros {
    /// Object-like `UBLK*` macros.
    object_like: BTreeSet<String>,
    /// Function-like `UBLK*` macros (reported, not checked).
    function_like: BTreeSet<String>,
}

fn scan_macros(text: &str) -> HeaderMacros {
    let dirs = directives(text);
    // Include guard: `#ifndef X` immediately followed by `#define X`.
    let guard = match dirs.as_slice() {
        [(a, x), (b, y), ..] if a == "ifndef" && b == "define" => {
            let (x, y) = (leading_ident(x.trim_start()), leading_ident(y.trim_start()));
            (x == y).then(|| x.to_string())
        }
        _ => None,
    };
    let mut object_like = BTreeSet::new();
    let mut function_like = BTreeSet::new();
    for (dir, rest) in &dirs {
        if dir != "define" || !rest.starts_with(char::is_whitespace) {
            continue;
        }
        let rest = rest.trim_start();
        let name = leading_ident(rest);
        if !name.starts_with("UBLK") || guard.as_deref() == Some(name) {
            continue;
        }
        if rest[name.len()..].starts_with('(') {
            function_like.insert(name.to_string());
        } else {
            object_like.insert(name.to_string());
        }
    }
    HeaderMacros {
        object_like,
        function_like,
    }
}

/// `struct NAME { ... };` definitions with their field names, in order.
/// Members of anonymous unions count as fields of the enclosing struct.
fn scan_structs(text: &str) -> BTreeMap<String, Vec<String>> {
    let text: String = strip_comments(text)
        .lines()
        .filter(|l| !l.trim_start().starts_with('#'))
        .collect::<Vec<_>>()
        .join("\n");
    let mut out = BTreeMap::new();
    let mut pos = 0;
    while let Some(i) = text[pos..].find("struct") {
        let start = pos + i;
        pos = start + "struct".len();
        let before_ok = !text[..start].ends_with(is_ident_char);
        let after = &text[pos..];
        if !before_ok || !after.starts_with(char::is_whitespace) {
            continue;
        }
        let after = after.trim_start();
        let name = leading_ident(after);
        if name.is_empty() || !after[name.len()..].trim_start().starts_with('{') {
            continue;
        }
        let open = pos + text[pos..].find('{').unwrap();
        let mut depth = 0usize;
        let mut close = open;
        for (j, c) in text[open..].char_indices() {
            match c {
                '{' => depth += 1,
                '}' => {
                    depth -= 1;
                    if depth == 0 {
                        close = open + j;
                        break;
                    }
                }
                _ => {}
            }
        }
        let body = &text[open + 1..close];
        let fields = body
            .split(';')
            .filter_map(|decl| {
                let decl = decl.rsplit(['{', '}']).next().unwrap_or("").trim();
                let decl = decl.split('[').next().unwrap().trim_end();
                let f = trailing_ident(decl);
                (!f.is_empty()).then(|| f.to_string())
            })
            .collect();
        out.insert(name.to_string(), fields);
        pos = close;
    }
    out
}

/// Names of `static inline` functions.
fn scan_inline_fns(text: &str) -> BTreeSet<String> {
    let text = strip_comments(text);
    let mut out = BTreeSet::new();
    let mut pos = 0;
    while let Some(i) = text[pos..].find("static inline") {
        let start = pos + i;
        if let Some(paren) = text[start..].find('(') {
            let name = trailing_ident(text[start..start + paren].trim_end());
            out.insert(name.to_string());
        }
        pos = start + "static inline".len();
    }
    out
}

/// `pub const UBLK*` items defined in the crate sources.
fn crate_consts() -> BTreeSet<String> {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut out = BTreeSet::new();
    for entry in std::fs::read_dir(&src).expect("read uapi/src") {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "rs") {
            let text = std::fs::read_to_string(&path).unwrap();
            for line in text.lines() {
                if let Some(rest) = line.trim_start().strip_prefix("pub const ") {
                    let name = leading_ident(rest);
                    if name.starts_with("UBLK") {
                        out.insert(name.to_string());
                    }
                }
            }
        }
    }
    out
}

// ---------------------------------------------------------------------------
// C program generation, build and run.
// ---------------------------------------------------------------------------

/// Marker appended to the temporary copy of the header, to prove that
/// `#include <linux/ublk_cmd.h>` resolved to it and not to the system one.
const COPY_MARKER: &str = "UBLK_UAPI_TEST_HEADER_COPY__";

fn generate_c(consts: &[ConstEntry], structs: &[StructEntry], helpers: &[HelperCheck]) -> String {
    let mut c = String::new();
    c.push_str(
        "#include <stdio.h>\n\
         #include <stddef.h>\n\
         #include <errno.h>\n\
         #include <linux/ioctl.h>\n\
         #include <linux/ublk_cmd.h>\n\n",
    );
    writeln!(
        c,
        "#ifndef {COPY_MARKER}\n#error \"wrong linux/ublk_cmd.h included\"\n#endif\n"
    )
    .unwrap();
    c.push_str(
        "#define PRINT_CONST(n) do { \\\n\
         \tif ((n) < 0) printf(\"const %s -%llu\\n\", #n, -(unsigned long long)(n)); \\\n\
         \telse printf(\"const %s %llu\\n\", #n, (unsigned long long)(n)); \\\n\
         } while (0)\n\n",
    );
    for (i, h) in helpers.iter().enumerate() {
        writeln!(
            c,
            "static unsigned long long helper_{i}(unsigned long long v)\n{{\n\t{}\n}}\n",
            h.c_body
        )
        .unwrap();
    }
    c.push_str("int main(void)\n{\n");
    for k in consts {
        writeln!(
            c,
            "#ifdef {n}\n\tPRINT_CONST({n});\n#else\n\tprintf(\"absent {n}\\n\");\n#endif",
            n = k.name
        )
        .unwrap();
    }
    for s in structs {
        writeln!(
            c,
            "\tprintf(\"struct {n} %zu %zu\\n\", sizeof(struct {n}), _Alignof(struct {n}));",
            n = s.c_name
        )
        .unwrap();
        for f in &s.fields {
            writeln!(
                c,
                "\tprintf(\"field {n} {f} %zu %zu %d\\n\", offsetof(struct {n}, {f}), \
                 sizeof(((struct {n} *)0)->{f}), \
                 __builtin_types_compatible_p(__typeof__(((struct {n} *)0)->{f}), {t}));",
                n = s.c_name,
                f = f.c_name,
                t = f.c_type
            )
            .unwrap();
        }
    }
    for (i, h) in helpers.iter().enumerate() {
        for v in HELPER_SAMPLES {
            writeln!(
                c,
                "\tprintf(\"helper {l} {v} %llu\\n\", helper_{i}({v}ULL));",
                l = h.label
            )
            .unwrap();
        }
    }
    c.push_str("\treturn 0;\n}\n");
    c
}

fn fmt_value(v: i128) -> String {
    if v < 0 {
        v.to_string()
    } else {
        format!("{v} ({v:#x})")
    }
}

fn unique_tmp_dir() -> PathBuf {
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!(
        "ublk-uapi-header-layout-{}-{nanos}",
        std::process::id()
    ))
}

/// Compiles and runs the C program; returns its stdout and the temp dir.
fn run_c(header: &Path, header_text: &str, program: &str) -> (String, PathBuf) {
    let dir = unique_tmp_dir();
    let inc = dir.join("include");
    std::fs::create_dir_all(inc.join("linux")).unwrap();
    std::fs::write(
        inc.join("linux/ublk_cmd.h"),
        format!("{header_text}\n#define {COPY_MARKER} 1\n"),
    )
    .unwrap();
    let src = dir.join("check.c");
    let exe = dir.join("check");
    std::fs::write(&src, program).unwrap();

    let cc = std::env::var("CC")
        .ok()
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "cc".into());
    let out = Command::new(&cc)
        .args(["-std=gnu11", "-Wall", "-Werror", "-o"])
        .arg(&exe)
        .arg("-I")
        .arg(&inc)
        .arg(&src)
        .output()
        .unwrap_or_else(|e| panic!("cannot run C compiler `{cc}`: {e}"));
    assert!(
        out.status.success(),
        "compiling the check program against {} failed ({}); sources kept in {}:\n{}",
        header.display(),
        out.status,
        dir.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    let out = Command::new(&exe).output().expect("run check program");
    assert!(out.status.success(), "check program failed: {}", out.status);
    (String::from_utf8(out.stdout).unwrap(), dir)
}

// ---------------------------------------------------------------------------
// Tests.
// ---------------------------------------------------------------------------

/// Skips, saying so on stderr, before the kernel tree is prepared: the
/// test harness has no "skipped" verdict, so it then reports `ok` (the
/// name says it may skip). `#[ignore]` would not do: it is static, and this
/// check must run wherever the header exists (CI runs it after
/// `build-kernel`).
#[test]
fn rust_definitions_match_header_else_skip() {
    let Some((header, text)) = read_header() else {
        return;
    };
    let consts = const_table();
    let structs = struct_table();
    let helpers = helper_table();
    let mut errors: Vec<String> = Vec::new();
    let mut notes: Vec<String> = Vec::new();

    // --- Coverage: header <-> table <-> crate -----------------------------
    let table_names: BTreeSet<String> = consts.iter().map(|k| k.name.to_string()).collect();
    assert_eq!(
        table_names.len(),
        consts.len(),
        "duplicate constant in table"
    );
    let macros = scan_macros(&text);
    for m in macros.object_like.difference(&table_names) {
        errors.push(format!(
            "header macro {m} is not covered by ublk-uapi (add it to the crate and the table)"
        ));
    }
    for m in &macros.function_like {
        notes.push(format!("function-like macro {m} in header is not checked"));
    }
    for name in crate_consts() {
        if !table_names.contains(&name) && !RUST_ONLY_CONSTS.contains(&name.as_str()) {
            errors.push(format!(
                "crate constant {name} is missing from the test table"
            ));
        }
    }

    let header_structs = scan_structs(&text);
    let table_structs: BTreeSet<&str> = structs.iter().map(|s| s.c_name).collect();
    for name in header_structs.keys() {
        if !table_structs.contains(name.as_str()) {
            errors.push(format!("header struct {name} is not covered by ublk-uapi"));
        }
    }
    for s in &structs {
        let table_fields: Vec<&str> = s.fields.iter().map(|f| f.c_name).collect();
        match header_structs.get(s.c_name) {
            None => errors.push(format!(
                "struct {} not found by the header scanner",
                s.c_name
            )),
            Some(hf) if *hf != table_fields => errors.push(format!(
                "struct {}: header fields {hf:?} != table fields {table_fields:?}",
                s.c_name
            )),
            Some(_) => {}
        }
    }

    let inline_fns = scan_inline_fns(&text);
    let covered_fns: BTreeSet<&str> = helpers
        .iter()
        .map(|h| h.label.split('.').next().unwrap())
        .collect();
    for f in &inline_fns {
        if !covered_fns.contains(f.as_str()) {
            errors.push(format!("header inline function {f}() is not covered"));
        }
    }

    // --- Compile, run and compare ----------------------------------------
    let program = generate_c(&consts, &structs, &helpers);
    let (output, tmp) = run_c(&header, &text, &program);

    let mut c_consts: BTreeMap<&str, Option<i128>> = BTreeMap::new();
    let mut c_structs: BTreeMap<&str, (usize, usize)> = BTreeMap::new();
    let mut c_fields: BTreeMap<(&str, &str), (usize, usize, bool)> = BTreeMap::new();
    let mut c_helpers: BTreeMap<(&str, u64), u64> = BTreeMap::new();
    for line in output.lines() {
        let w: Vec<&str> = line.split_whitespace().collect();
        match w.as_slice() {
            ["const", n, v] => {
                c_consts.insert(n, Some(v.parse().unwrap()));
            }
            ["absent", n] => {
                c_consts.insert(n, None);
            }
            ["struct", n, size, align] => {
                c_structs.insert(n, (size.parse().unwrap(), align.parse().unwrap()));
            }
            ["field", s, f, off, size, compat] => {
                c_fields.insert(
                    (s, f),
                    (off.parse().unwrap(), size.parse().unwrap(), *compat == "1"),
                );
            }
            ["helper", l, v, r] => {
                c_helpers.insert((l, v.parse().unwrap()), r.parse().unwrap());
            }
            _ => panic!("unexpected line from check program: {line:?}"),
        }
    }

    let mut n_present = 0;
    for k in &consts {
        match c_consts.get(k.name) {
            Some(Some(v)) => {
                n_present += 1;
                if *v != k.value {
                    errors.push(format!(
                        "{}: header {} != rust {}",
                        k.name,
                        fmt_value(*v),
                        fmt_value(k.value)
                    ));
                }
            }
            Some(None) if k.optional => notes.push(format!(
                "{} not defined by this header (pending kernel patch); rust value {:#x} accepted",
                k.name, k.value
            )),
            Some(None) => errors.push(format!("{} is not defined by the header", k.name)),
            None => errors.push(format!("{}: no output from check program", k.name)),
        }
    }

    let mut n_fields = 0;
    for s in &structs {
        let (size, align) = c_structs[s.c_name];
        if (size, align) != (s.size, s.align) {
            errors.push(format!(
                "struct {} / {}: C size {size} align {align}, rust size {} align {}",
                s.c_name, s.rust_name, s.size, s.align
            ));
        }
        for f in &s.fields {
            n_fields += 1;
            let (off, fsize, compat) = c_fields[&(s.c_name, f.c_name)];
            if (off, fsize) != (f.offset, f.size) {
                errors.push(format!(
                    "{}.{} ({}::{}): C offset {off} size {fsize}, rust offset {} size {}",
                    s.c_name, f.c_name, s.rust_name, f.rust_name, f.offset, f.size
                ));
            }
            if !compat {
                errors.push(format!(
                    "{}.{} ({}::{}): C type is not compatible with {}",
                    s.c_name, f.c_name, s.rust_name, f.rust_name, f.c_type
                ));
            }
        }
    }

    let mut n_helper_values = 0;
    for h in &helpers {
        for &v in HELPER_SAMPLES {
            n_helper_values += 1;
            let c = c_helpers[&(h.label, v)];
            let r = (h.rust)(v);
            if c != r {
                errors.push(format!("{}({v:#x}): C {c:#x} != rust {r:#x}", h.label));
            }
        }
    }

    println!("header: {}", header.display());
    println!(
        "checked {} constants ({} present in header, {} header UBLK* macros scanned), \
         {} structs (size+align), {} fields (offset+size+type), \
         {} inline helpers x {} inputs = {} values",
        consts.len(),
        n_present,
        macros.object_like.len(),
        structs.len(),
        n_fields,
        helpers.len(),
        HELPER_SAMPLES.len(),
        n_helper_values
    );
    for n in &notes {
        println!("note: {n}");
    }
    if errors.is_empty() {
        let _ = std::fs::remove_dir_all(&tmp);
    } else {
        panic!(
            "{} mismatch(es) between ublk-uapi and {} (C sources in {}):\n  {}",
            errors.len(),
            header.display(),
            tmp.display(),
            errors.join("\n  ")
        );
    }
}

#[test]
fn rq_affinity_flag_value() {
    assert_eq!(UBLK_F_SUPPORT_RQ_AFFINITY, 1 << 21);
}

/// The uapi has no `UBLK_F_ALL`-style mask: every `UBLK_F_*` is one distinct
/// bit, and together they form a contiguous range starting at bit 0.
#[test]
fn feature_flags_are_distinct_single_bits() {
    let flags: Vec<(&str, i128)> = const_table()
        .into_iter()
        .filter(|k| k.name.starts_with("UBLK_F_"))
        .map(|k| (k.name, k.value))
        .collect();
    let mut seen = 0u64;
    for (name, v) in &flags {
        let v = u64::try_from(*v).unwrap();
        assert_eq!(v.count_ones(), 1, "{name} is not a single bit");
        assert_eq!(seen & v, 0, "{name} reuses a bit of another UBLK_F_* flag");
        seen |= v;
    }
    assert_eq!(
        seen,
        (1u64 << flags.len()) - 1,
        "UBLK_F_* bits are not contiguous"
    );
}

#[test]
fn ioctl_opcodes_embed_legacy_numbers() {
    use ublk_uapi::ioctl::{ioc_nr, ioc_size, ioc_type};
    let pairs = [
        (UBLK_U_CMD_GET_QUEUE_AFFINITY, UBLK_CMD_GET_QUEUE_AFFINITY),
        (UBLK_U_CMD_GET_DEV_INFO, UBLK_CMD_GET_DEV_INFO),
        (UBLK_U_CMD_ADD_DEV, UBLK_CMD_ADD_DEV),
        (UBLK_U_CMD_DEL_DEV, UBLK_CMD_DEL_DEV),
        (UBLK_U_CMD_START_DEV, UBLK_CMD_START_DEV),
        (UBLK_U_CMD_STOP_DEV, UBLK_CMD_STOP_DEV),
        (UBLK_U_CMD_SET_PARAMS, UBLK_CMD_SET_PARAMS),
        (UBLK_U_CMD_GET_PARAMS, UBLK_CMD_GET_PARAMS),
        (UBLK_U_CMD_START_USER_RECOVERY, UBLK_CMD_START_USER_RECOVERY),
        (UBLK_U_CMD_END_USER_RECOVERY, UBLK_CMD_END_USER_RECOVERY),
        (UBLK_U_CMD_GET_DEV_INFO2, UBLK_CMD_GET_DEV_INFO2),
        (UBLK_U_IO_FETCH_REQ, UBLK_IO_FETCH_REQ),
        (UBLK_U_IO_COMMIT_AND_FETCH_REQ, UBLK_IO_COMMIT_AND_FETCH_REQ),
        (UBLK_U_IO_NEED_GET_DATA, UBLK_IO_NEED_GET_DATA),
    ];
    for (u, legacy) in pairs {
        assert_eq!(u32::from(ioc_nr(u)), legacy);
        assert_eq!(ioc_type(u), ublk_uapi::ioctl::UBLK_IOC_TYPE);
        assert!(
            ioc_size(u) == size_of::<UblksrvCtrlCmd>() || ioc_size(u) == size_of::<UblksrvIoCmd>()
        );
    }
}
