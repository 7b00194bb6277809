/* conv.h - `tlm run` for convolutions (tools). */
#ifndef TLM_TOOLS_CONV_H
#define TLM_TOOLS_CONV_H

/* `tlm run` for one convolution descriptor (argv after "run": the
 * descriptor and the options); returns the exit status. With --batch FILE,
 * every problem of the file. */
int tlm_cmd_run_conv(int argc, char **argv);

#endif
