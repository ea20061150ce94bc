/* commands.h: one entry point per `lmtune` command; each file cmd_*.c owns
 * one command: its flags, its --help and its output. Each returns the
 * process exit status. */
#ifndef LT_COMMANDS_H
#define LT_COMMANDS_H
int cmd_train(int argc, char **argv);
int cmd_plan(int argc, char **argv);
int cmd_eval(int argc, char **argv);
int cmd_generate(int argc, char **argv);
int cmd_fuse(int argc, char **argv);
int cmd_init(int argc, char **argv);
int cmd_convert(int argc, char **argv);
int cmd_report(int argc, char **argv);
#endif
