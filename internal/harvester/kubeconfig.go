package harvester

import (
	"errors"
	"fmt"
	"sort"
	"time"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// RESTConfigFromKubeconfig turns the kubeconfig held in a credentials Secret into a client config.
//
// Only self-contained credentials are accepted: exec plugins and auth providers would run programs
// or reach services on the manager's host, and file references (token, certificate or key files)
// would read the manager's own files, such as its ServiceAccount token. The error never contains
// the kubeconfig's content.
func RESTConfigFromKubeconfig(data []byte, endpoint string) (*rest.Config, error) {
	cfg, err := clientcmd.Load(data)
	if err != nil {
		return nil, errors.New("the kubeconfig does not parse as a kubeconfig file")
	}
	if err := checkSelfContained(cfg); err != nil {
		return nil, err
	}
	overrides := &clientcmd.ConfigOverrides{}
	if endpoint != "" {
		overrides.ClusterInfo.Server = endpoint
	}
	rc, err := clientcmd.NewDefaultClientConfig(*cfg, overrides).ClientConfig()
	if err != nil {
		return nil, fmt.Errorf("the kubeconfig is incomplete: %s", redactedConfigError(err))
	}
	rc.Timeout = 30 * time.Second
	return rc, nil
}

func checkSelfContained(cfg *clientcmdapi.Config) error {
	var problems []string
	for name, user := range cfg.AuthInfos {
		switch {
		case user.Exec != nil:
			problems = append(problems, fmt.Sprintf("user %q uses an exec plugin", name))
		case user.AuthProvider != nil:
			problems = append(problems, fmt.Sprintf("user %q uses an auth provider", name))
		case user.TokenFile != "" || user.ClientCertificate != "" || user.ClientKey != "":
			problems = append(problems, fmt.Sprintf("user %q refers to files (use token, client-certificate-data and client-key-data)", name))
		}
	}
	for name, cluster := range cfg.Clusters {
		if cluster.CertificateAuthority != "" {
			problems = append(problems, fmt.Sprintf("cluster %q refers to a CA file (use certificate-authority-data)", name))
		}
	}
	if len(problems) == 0 {
		return nil
	}
	sort.Strings(problems)
	return fmt.Errorf("the kubeconfig must be self-contained: %v", problems)
}

// redactedConfigError keeps clientcmd's explanation, which names fields, never their values.
func redactedConfigError(err error) string {
	if clientcmd.IsEmptyConfig(err) {
		return "it has no current context or cluster"
	}
	return err.Error()
}
