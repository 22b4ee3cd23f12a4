// attn-lab: the command table's entries (commands.cpp) behind one binary.
// Every error is one line on stderr and exit status 2.
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <new>

#include "attn/registry/plugin.hpp"
#include "attn/simd/simd.hpp"
#include "cli/command.hpp"

namespace attn::cli {
namespace {

std::string command_names() {
  std::string s;
  for (const Command& c : commands()) s += (s.empty() ? "" : ", ") + std::string(c.name);
  for (const ScriptCommand& c : script_commands()) s += ", " + std::string(c.name);
  return s;
}

void print_help() {
  std::cout << "attn-lab: scaled dot-product attention, O = softmax(Q K^T * scale + mask) V,\n"
               "computed by any registered backend, in any precision.\n\ncommands:\n";
  for (const Command& c : commands()) std::cout << c.summary;
  for (const ScriptCommand& c : script_commands()) std::cout << c.summary;
  std::cout << "  attn-lab --help, attn-lab COMMAND --help\n\n"
               "Any command takes --plugin PATH (repeatable): the kernels of a plugin library\n"
               "(include/attn/plugin.h) become backends beside the built-in ones.\n\n"
               "Files are written atomically (a temporary file renamed into place); an existing file is\n"
               "kept unless --force is given. Bad input prints one line to stderr and exits 2.\n\n"
               "examples:\n"
               "  attn-lab list\n"
               "  attn-lab attend --help\n";
}

// --plugin PATH (repeatable, any command): loads the library's kernels as
// backends before the command runs, and leaves the command's own options.
std::vector<std::string> take_plugins(std::vector<std::string> argv) {
  std::vector<std::string> rest;
  for (std::size_t i = 0; i < argv.size(); ++i) {
    if (argv[i] == "--plugin") {
      if (i + 1 >= argv.size()) throw Error("--plugin needs the path of a plugin library");
      load_plugin(argv[++i]);
    } else if (argv[i].rfind("--plugin=", 0) == 0) {
      load_plugin(argv[i].substr(9));
    } else {
      rest.push_back(argv[i]);
    }
  }
  return rest;
}

int dispatch(int argc, char** argv) {
  const std::string name = argc > 1 ? argv[1] : "";
  if (name == "--help" || name == "-h" || name == "help") {
    print_help();
    return 0;
  }
  for (const ScriptCommand& c : script_commands()) {
    if (c.name != name) continue;
    const std::string module(c.module), dir = ATTN_PYTHON_DIR;
    if (!std::filesystem::exists(dir + "/attention_lab"))
      throw Error("'" + name + "' runs the Python module " + module + " from " + dir +
                  ", which is missing (attn-lab runs from its source tree)");
    const char* old_path = std::getenv("PYTHONPATH");
    const std::string path = old_path && *old_path ? dir + ":" + old_path : dir;
    ::setenv("PYTHONPATH", path.c_str(), 1);
    if (!std::filesystem::exists(ATTN_PYTHON))
      throw Error("'" + name + "' runs " + std::string(ATTN_PYTHON) +
                  ", the project's Python environment, which is missing (scripts/setup.sh makes it)");
    std::vector<char*> args = {const_cast<char*>(ATTN_PYTHON), const_cast<char*>("-m"),
                               const_cast<char*>(module.c_str())};
    for (int i = 2; i < argc; ++i) args.push_back(argv[i]);
    args.push_back(nullptr);
    std::fflush(stdout);
    execv(args[0], args.data());
    throw Error("'" + name + "' cannot run " + std::string(ATTN_PYTHON) + " (" + std::strerror(errno) + ")");
  }
  for (const Command& c : commands()) {
    if (c.name != name) continue;
    std::set<std::string> flags = c.flags;
    flags.insert("--help");
    // verify takes --plugin itself: it never loads the untrusted library in this process
    std::vector<std::string> rest(argv + 2, argv + argc);
    const Args args(name == "verify" ? rest : take_plugins(rest), c.valued, flags);
    if (args.flag("--help")) {
      // commands that take the variants' options list them before their examples
      std::string help(c.help);
      const auto examples = help.find("\nexamples:");
      if (c.valued.count("--softcap") && examples != std::string::npos)
        help.insert(examples + 1, std::string(kVariantHelp));
      std::cout << help;
      return 0;
    }
    return c.run(args);
  }
  throw Error(name.empty() ? "no command given (" + command_names() + "; see --help)"
                           : "unknown command '" + name + "' (" + command_names() + "; see --help)");
}

}  // namespace
}  // namespace attn::cli

int main(int argc, char** argv) {
  try {
    (void)attn::simd();  // the vector kernels chosen first: a CPU without the baseline gets one clear line
    return attn::cli::dispatch(argc, argv);
  } catch (const attn::Error& e) {
    std::fprintf(stderr, "attn-lab: %s\n", e.what());
  } catch (const std::bad_alloc&) {
    std::fprintf(stderr, "attn-lab: out of memory (the problem is too large for this machine)\n");
  } catch (const std::exception& e) {
    std::fprintf(stderr, "attn-lab: %s\n", e.what());
  }
  return 2;
}
