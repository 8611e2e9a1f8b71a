// The command lines' shared CLI11 pieces (app/cli.hpp).
#include "app/cli.hpp"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <utility>

#include "base/error.hpp"
#include "base/text.hpp"

namespace uipc::cli {
namespace {

// strtod over the whole word; false when it is not a number.
bool to_number(const std::string& v, double& x) {
  char* end = nullptr;
  x = v.empty() ? 0 : std::strtod(v.c_str(), &end);
  return !v.empty() && end == v.c_str() + v.size();
}

std::string trim_number(double x) {
  std::string s = std::to_string(x);
  while (s.find('.') != std::string::npos && (s.back() == '0' || s.back() == '.')) {
    const bool dot = s.back() == '.';
    s.pop_back();
    if (dot) break;
  }
  return s;
}

// The selected subcommand chain below `app`, by name ("new", or "" when none).
std::string selected_path(const CLI::App& app) {
  std::string path;
  const CLI::App* at = &app;
  for (;;) {
    std::vector<CLI::App*> subs = at->get_subcommands();  // the selected ones
    if (subs.empty()) return path;
    at = subs.front();
    path += (path.empty() ? "" : " ") + at->get_name();
  }
}

std::string with_newline(std::string s) {
  if (s.empty() || s.back() != '\n') s += '\n';
  return s;
}

}  // namespace

CLI::Validator one_of(std::vector<std::string> allowed) {
  return CLI::Validator(
      [allowed](std::string& v) -> std::string {
        if (std::find(allowed.begin(), allowed.end(), v) != allowed.end()) return "";
        return "unknown value '" + v + "' (allowed: " + join(allowed) + ")";
      },
      "");
}

CLI::Option* add_on_off(CLI::App& app, const std::string& name, bool& flag, const std::string& help) {
  return app.add_option_function<std::string>(name, [&flag](const std::string& v) { flag = v == "on"; }, help)
      ->type_name("on|off")
      ->check(one_of({"on", "off"}))
      ->default_str(flag ? "on" : "off");
}

CLI::Validator number_in(double lo_exclusive, double hi) {
  return CLI::Validator(
      [lo_exclusive, hi](std::string& v) -> std::string {
        double x = 0;
        if (!to_number(v, x) || !std::isfinite(x)) return "'" + v + "' is not a finite number";
        if (!(x > lo_exclusive && x <= hi))
          return v + " must be in (" + trim_number(lo_exclusive) + ", " + trim_number(hi) + "]";
        return "";
      },
      "");
}

CLI::Validator integer_in(long long lo, long long hi) {
  return CLI::Validator(
      [lo, hi](std::string& v) -> std::string {
        double x = 0;
        if (!to_number(v, x) || !(x >= static_cast<double>(lo) && x <= static_cast<double>(hi)) ||
            x != std::floor(x))
          return "'" + v + "' must be an integer in " + std::to_string(lo) + ".." + std::to_string(hi);
        return "";
      },
      "");
}

std::string usage_message(const CLI::App& app, const std::string& sub, const std::string& what) {
  const std::string command = app.get_name() + (sub.empty() ? "" : " " + sub);
  return (sub.empty() ? "" : sub + ": ") + what + " (see '" + command + " --help')";
}

std::string help_all(const CLI::App& app) {
  return with_newline(app.get_formatter()->make_help(&app, app.get_name(), CLI::AppFormatMode::All));
}

std::string parse(CLI::App& app, const std::vector<std::string>& args) {
  // A word where a subcommand must be: CLI11 would only say that one is required.
  std::vector<std::string> names;
  for (const CLI::App* s : std::as_const(app).get_subcommands([](const CLI::App*) { return true; }))
    names.push_back(s->get_name());
  if (app.get_require_subcommand_min() > 0 && !args.empty() && !args[0].empty() && args[0][0] != '-' &&
      std::find(names.begin(), names.end(), args[0]) == names.end()) {
    throw InputError(usage_message(app, "", "unknown subcommand '" + args[0] + "' (allowed: " + join(names) + ")"));
  }
  std::vector<std::string> reversed(args.rbegin(), args.rend());  // CLI11 takes them last first
  try {
    app.parse(reversed);
  } catch (const CLI::CallForHelp&) {
    return with_newline(app.help());  // delegates to the subcommand that was asked
  } catch (const CLI::CallForAllHelp&) {
    return help_all(app);
  } catch (const CLI::CallForVersion& e) {
    return with_newline(e.what());
  } catch (const CLI::ParseError& e) {
    throw InputError(usage_message(app, selected_path(app), e.what()));
  }
  return "";
}

}  // namespace uipc::cli
