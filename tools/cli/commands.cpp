// The command table: one line per command, in the order --help lists them.
#include "cli/command.hpp"

namespace attn::cli {

extern const Command list_command, attend_command, layer_command, demo_command, peak_command, accuracy_command,
    entropy_command, claims_command, verify_command, invariance_command;

const std::vector<Command>& commands() {
  static const std::vector<Command> table = {list_command, attend_command,   layer_command,   demo_command,
                                             peak_command, accuracy_command, entropy_command, claims_command,
                                             verify_command, invariance_command};
  return table;
}

const std::vector<ScriptCommand>& script_commands() {
  static const std::vector<ScriptCommand> table = {
      {"compare",
       "  attn-lab compare A B [--out DIR] [--fail-on-regression PCT] [--across-machines]\n"
       "      two runs benchmark by benchmark: ratio with its interval, Mann-Whitney U, Holm\n",
       "attention_lab.compare"},
      {"history",
       "  attn-lab history [--benchmark REGEX] [--machine FP] | attn-lab history append RUN...\n"
       "      every run's results across commits and machines (reports/history.sqlite)\n",
       "attention_lab.history"},
  };
  return table;
}

}  // namespace attn::cli
