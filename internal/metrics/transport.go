package metrics

import (
	"net/http"
	"strconv"
	"strings"
)

// InstrumentHarvester wraps the transport of a Harvester client so that every request is counted
// in butler_harvester_api_requests_total and every failure in butler_harvester_api_errors_total.
// Use it as rest.Config.WrapTransport.
func InstrumentHarvester(next http.RoundTripper) http.RoundTripper {
	return roundTripperFunc(func(req *http.Request) (*http.Response, error) {
		resp, err := next.RoundTrip(req)
		verb, resource := RequestVerbAndResource(req)
		code := codeTransportErrorLabel
		if err == nil {
			code = strconv.Itoa(resp.StatusCode)
		}
		HarvesterAPIRequests.WithLabelValues(verb, resource, code).Inc()
		if err != nil || (resp.StatusCode >= 400 && resp.StatusCode != http.StatusNotFound) {
			HarvesterAPIErrors.WithLabelValues(verb, resource, code).Inc()
		}
		return resp, err
	})
}

// codeTransportErrorLabel is the code of a request that got no response.
const codeTransportErrorLabel = "transport"

type roundTripperFunc func(*http.Request) (*http.Response, error)

func (f roundTripperFunc) RoundTrip(req *http.Request) (*http.Response, error) { return f(req) }

// RequestVerbAndResource names a Kubernetes API request the way RBAC does: verb (get, list, watch,
// create, update, patch, delete, deletecollection) and resource ("secrets",
// "virtualmachines.kubevirt.io", with "/subresource" if any). Requests outside the resource API
// (discovery, /version) have resource "nonresource" and the lower-cased HTTP method as verb.
func RequestVerbAndResource(req *http.Request) (verb, resource string) {
	group, rest, ok := splitAPIPath(req.URL.Path)
	if !ok || len(rest) == 0 {
		return strings.ToLower(req.Method), "nonresource"
	}
	// namespaces/<ns>/<resource>/..., except the namespace's own subresources.
	if len(rest) >= 3 && rest[0] == "namespaces" && rest[2] != "status" && rest[2] != "finalize" {
		rest = rest[2:]
	}
	resource = rest[0]
	if group != "" {
		resource += "." + group
	}
	named := len(rest) >= 2
	if len(rest) >= 3 {
		resource += "/" + rest[2]
	}
	return verbFor(req, named), resource
}

// splitAPIPath splits /api/v1/... and /apis/<group>/<version>/... into the group and the path
// segments after the version.
func splitAPIPath(path string) (group string, rest []string, ok bool) {
	parts := strings.Split(strings.Trim(path, "/"), "/")
	switch {
	case len(parts) >= 2 && parts[0] == "api":
		return "", parts[2:], true
	case len(parts) >= 3 && parts[0] == "apis":
		return parts[1], parts[3:], true
	}
	return "", nil, false
}

func verbFor(req *http.Request, named bool) string {
	switch req.Method {
	case http.MethodGet, http.MethodHead:
		switch {
		case req.URL.Query().Get("watch") == "true" || req.URL.Query().Get("watch") == "1":
			return "watch"
		case named:
			return "get"
		}
		return "list"
	case http.MethodPost:
		return "create"
	case http.MethodPut:
		return "update"
	case http.MethodPatch:
		return "patch"
	case http.MethodDelete:
		if named {
			return "delete"
		}
		return "deletecollection"
	}
	return strings.ToLower(req.Method)
}
