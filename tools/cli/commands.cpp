// The command table: one line per command, in the order --help lists them.
#include "cli/command.hpp"

namespace attn::cli {

extern const Command list_command, attend_command, layer_command, demo_command, peak_command, accuracy_command,
    entropy_command, claims_command, verify_command;

const std::vector<Command>& commands() {
  static const std::vector<Command> table = {list_command, attend_command,   layer_command,   demo_command,
                                             peak_command, accuracy_command, entropy_command, claims_command,
                                             verify_command};
  return table;
}

}  // namespace attn::cli
