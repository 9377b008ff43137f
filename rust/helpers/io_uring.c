// SPDX-License-Identifier: GPL-2.0

#include <linux/io_uring/cmd.h>

/*
 * kernel::io_uring reads a command's ring as io_uring_cmd_ctx_handle() does,
 * cmd_to_io_kiocb(cmd)->ctx, with a cast: the command is the start of its
 * struct io_kiocb.
 */
static_assert(offsetof(struct io_kiocb, cmd) == 0);

__rust_helper void rust_helper_io_uring_cmd_complete_in_task(struct io_uring_cmd *cmd,
							     io_req_tw_func_t task_work_cb)
{
	io_uring_cmd_complete_in_task(cmd, task_work_cb);
}

__rust_helper void rust_helper_io_uring_cmd_done(struct io_uring_cmd *cmd, s32 ret,
						 unsigned int issue_flags)
{
	io_uring_cmd_done(cmd, ret, issue_flags);
}

__rust_helper struct io_uring_cmd *rust_helper_io_uring_cmd_from_tw(struct io_tw_req tw_req)
{
	return io_uring_cmd_from_tw(tw_req);
}

/*
 * The command area of an SQE is a flexible array member, which bindgen cannot
 * name. Its size is the rest of the SQE: kernel::io_uring relies on the value
 * checked here.
 */
__rust_helper const void *rust_helper_io_uring_sqe_cmd(const struct io_uring_sqe *sqe)
{
	BUILD_BUG_ON(sizeof(*sqe) - offsetof(struct io_uring_sqe, cmd) != 16);
	return sqe->cmd;
}
