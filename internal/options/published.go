package options

import (
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
)

// The published provider's manager (kubebuilder's scaffold) has flags this one names otherwise or
// has no use for: controller-runtime's zap logging flags, its certificate flags, and --kubeconfig,
// which controller-runtime's config package reads. Deployments made for it (the Butler CLI's
// manifest, the published chart's extraArgs, users' own) may pass any of them, so the manager
// accepts them all: Parse maps each onto this manager's flag where one fits and ignores the rest,
// and says which in Options.FlagNotes, one line a flag given.
const publishedUsage = "Flag of the published provider's manager, accepted so that its deployments keep working: "

// publishedIgnored are the published flags this manager has no use for, with the reason.
var publishedIgnored = []struct{ name, def, why string }{
	{"zap-devel", "false", "--log-level and --log-format set the logging"},
	{"zap-stacktrace-level", "", "this manager logs no stack traces"},
	{"zap-time-encoding", "", "times are logged in RFC 3339 (log/slog)"},
	{"webhook-cert-path", "", "this manager serves no webhooks"},
	{"webhook-cert-name", "tls.crt", "this manager serves no webhooks"},
	{"webhook-cert-key", "tls.key", "this manager serves no webhooks"},
}

// addPublishedFlags defines the published flags that have no flag of the same name here.
func addPublishedFlags(fs *flag.FlagSet) {
	fs.String("zap-log-level", "", publishedUsage+"mapped onto --log-level: debug, info, error, panic (as error), or a verbosity above 0 (logr's V levels up to it).")
	fs.String("zap-encoder", "", publishedUsage+"mapped onto --log-format: json, or console (as text).")
	fs.String("metrics-cert-path", "", publishedUsage+"mapped onto --metrics-cert-dir.")
	for _, f := range publishedIgnored {
		usage := publishedUsage + "ignored: " + f.why + "."
		if f.def == "false" {
			fs.Bool(f.name, false, usage)
		} else {
			fs.String(f.name, f.def, usage)
		}
	}
}

// adoptPublishedFlags maps the published flags given in fs onto o and notes what it did with each
// given, in the order they are defined. A mapped flag that contradicts the flag it maps onto, also
// given, is an error: which one was meant cannot be told.
func (o *Options) adoptPublishedFlags(fs *flag.FlagSet) error {
	given := map[string]string{}
	fs.Visit(func(f *flag.Flag) { given[f.Name] = f.Value.String() })
	var errs []error
	mapOnto := func(published, ours string, convert func(string) (string, error), into *string) {
		raw, ok := given[published]
		if !ok {
			return
		}
		value, err := convert(raw)
		switch v, both := given[ours]; {
		case err != nil:
			errs = append(errs, err)
		case both && v != value:
			errs = append(errs, fmt.Errorf("--%s=%s (--%s=%s) contradicts --%s=%s: give one of them", published, raw, ours, value, ours, v))
		default:
			*into = value
			o.FlagNotes = append(o.FlagNotes, fmt.Sprintf("--%s=%s (a flag of the published provider) is mapped onto --%s=%s", published, raw, ours, value))
		}
	}
	mapOnto("zap-log-level", "log-level", logLevelOfZap, &o.LogLevel)
	mapOnto("zap-encoder", "log-format", logFormatOfZap, &o.LogFormat)
	mapOnto("metrics-cert-path", "metrics-cert-dir", func(v string) (string, error) { return v, nil }, &o.MetricsCertDir)
	for _, f := range publishedIgnored {
		if raw, ok := given[f.name]; ok {
			o.FlagNotes = append(o.FlagNotes, fmt.Sprintf("--%s=%s (a flag of the published provider) is ignored: %s", f.name, raw, f.why))
		}
	}
	// controller-runtime's ctrl.GetConfig reads --kubeconfig from the standard flag set, which
	// this manager does not parse: the flag is its own, and said to be used, since it overrides
	// the in-cluster config and KUBECONFIG.
	if path, ok := given["kubeconfig"]; ok && path != "" {
		o.FlagNotes = append(o.FlagNotes, fmt.Sprintf("--kubeconfig=%s: the management cluster is the current context of that file, not the in-cluster config or KUBECONFIG", path))
	}
	return errors.Join(errs...)
}

// logLevelOfZap converts a value of controller-runtime's --zap-log-level into a --log-level value.
func logLevelOfZap(v string) (string, error) {
	switch l := strings.ToLower(v); l {
	case "debug", "info", "error":
		return l, nil
	case "panic":
		return "error", nil // the quietest level log/slog has
	}
	n, err := strconv.Atoi(v)
	if err != nil || n <= 0 {
		return "", fmt.Errorf("--zap-log-level %q: use debug, info, error, panic or a verbosity above 0", v)
	}
	// zap's level -n shows logr's V(0) to V(n); behind logr, log/slog shows V(n) from level -n.
	return slog.Level(-n).String(), nil
}

// logFormatOfZap converts a value of controller-runtime's --zap-encoder into a --log-format value.
func logFormatOfZap(v string) (string, error) {
	switch v {
	case "json":
		return "json", nil
	case "console":
		return "text", nil
	}
	return "", fmt.Errorf("--zap-encoder %q: use json or console", v)
}
