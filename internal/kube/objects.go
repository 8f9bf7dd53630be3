package kube

// The Kubernetes objects an export writes, as far as it uses them: field
// names and JSON tags are the API's (core/v1, networking.k8s.io/v1), so
// that an API server decodes them strictly. Only what the export sets is
// here; omitempty leaves out the rest.

// Meta is an object's metadata.
type Meta struct {
	Name        string            `json:"name"`
	Namespace   string            `json:"namespace,omitempty"`
	Labels      map[string]string `json:"labels,omitempty"`
	Annotations map[string]string `json:"annotations,omitempty"`
}

// Object is any object of the export: what every kind shares, for the
// tests and the documents' order.
type Object interface {
	kind() string
	meta() Meta
}

type typeMeta struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
}

func (t typeMeta) kind() string { return t.Kind }

// ConfigMap holds the generated config of the router or the forwarder.
type ConfigMap struct {
	typeMeta `json:",inline"`
	Metadata Meta              `json:"metadata"`
	Data     map[string]string `json:"data"`
}

func (c ConfigMap) meta() Meta { return c.Metadata }

// Secret holds the user's credentials; only the router pod mounts it.
type Secret struct {
	typeMeta   `json:",inline"`
	Metadata   Meta              `json:"metadata"`
	Type       string            `json:"type"`
	StringData map[string]string `json:"stringData"`
}

func (s Secret) meta() Meta { return s.Metadata }

// Service gives the router a fixed address: the agent pod's nameserver
// must be an IP literal.
type Service struct {
	typeMeta `json:",inline"`
	Metadata Meta        `json:"metadata"`
	Spec     ServiceSpec `json:"spec"`
}

func (s Service) meta() Meta { return s.Metadata }

type ServiceSpec struct {
	ClusterIP string            `json:"clusterIP"`
	Selector  map[string]string `json:"selector"`
	Ports     []ServicePort     `json:"ports"`
}

type ServicePort struct {
	Name       string `json:"name"`
	Protocol   string `json:"protocol"`
	Port       int    `json:"port"`
	TargetPort int    `json:"targetPort"`
}

// PersistentVolumeClaim is the agent's home.
type PersistentVolumeClaim struct {
	typeMeta `json:",inline"`
	Metadata Meta      `json:"metadata"`
	Spec     ClaimSpec `json:"spec"`
}

func (p PersistentVolumeClaim) meta() Meta { return p.Metadata }

type ClaimSpec struct {
	AccessModes []string            `json:"accessModes"`
	Resources   VolumeResourceNeeds `json:"resources"`
}

type VolumeResourceNeeds struct {
	Requests map[string]string `json:"requests"`
}

// Pod is the router's or the agent's.
type Pod struct {
	typeMeta `json:",inline"`
	Metadata Meta    `json:"metadata"`
	Spec     PodSpec `json:"spec"`
}

func (p Pod) meta() Meta { return p.Metadata }

type PodSpec struct {
	AutomountServiceAccountToken *bool               `json:"automountServiceAccountToken"`
	EnableServiceLinks           *bool               `json:"enableServiceLinks"`
	Hostname                     string              `json:"hostname,omitempty"`
	DNSPolicy                    string              `json:"dnsPolicy,omitempty"`
	DNSConfig                    *PodDNSConfig       `json:"dnsConfig,omitempty"`
	RestartPolicy                string              `json:"restartPolicy"`
	SecurityContext              *PodSecurityContext `json:"securityContext"`
	InitContainers               []Container         `json:"initContainers,omitempty"`
	Containers                   []Container         `json:"containers"`
	Volumes                      []Volume            `json:"volumes,omitempty"`
}

type PodDNSConfig struct {
	Nameservers []string       `json:"nameservers"`
	Searches    []string       `json:"searches"`
	Options     []PodDNSOption `json:"options,omitempty"`
}

type PodDNSOption struct {
	Name  string `json:"name"`
	Value string `json:"value,omitempty"`
}

type PodSecurityContext struct {
	RunAsNonRoot   *bool           `json:"runAsNonRoot,omitempty"`
	RunAsUser      *int64          `json:"runAsUser,omitempty"`
	RunAsGroup     *int64          `json:"runAsGroup,omitempty"`
	FSGroup        *int64          `json:"fsGroup,omitempty"`
	SeccompProfile *SeccompProfile `json:"seccompProfile,omitempty"`
	Sysctls        []Sysctl        `json:"sysctls,omitempty"`
}

type SeccompProfile struct {
	Type string `json:"type"`
}

type Sysctl struct {
	Name  string `json:"name"`
	Value string `json:"value"`
}

type Container struct {
	Name            string           `json:"name"`
	Image           string           `json:"image"`
	ImagePullPolicy string           `json:"imagePullPolicy,omitempty"`
	Command         []string         `json:"command,omitempty"`
	WorkingDir      string           `json:"workingDir,omitempty"`
	Env             []EnvVar         `json:"env,omitempty"`
	VolumeMounts    []VolumeMount    `json:"volumeMounts,omitempty"`
	Stdin           bool             `json:"stdin,omitempty"`
	TTY             bool             `json:"tty,omitempty"`
	RestartPolicy   string           `json:"restartPolicy,omitempty"`
	SecurityContext *SecurityContext `json:"securityContext"`
}

type EnvVar struct {
	Name      string        `json:"name"`
	Value     string        `json:"value,omitempty"`
	ValueFrom *EnvVarSource `json:"valueFrom,omitempty"`
}

type EnvVarSource struct {
	FieldRef     *FieldSelector     `json:"fieldRef,omitempty"`
	SecretKeyRef *SecretKeySelector `json:"secretKeyRef,omitempty"`
}

type SecretKeySelector struct {
	Name string `json:"name"`
	Key  string `json:"key"`
}

type FieldSelector struct {
	FieldPath string `json:"fieldPath"`
}

type VolumeMount struct {
	Name      string `json:"name"`
	MountPath string `json:"mountPath"`
	SubPath   string `json:"subPath,omitempty"`
	ReadOnly  bool   `json:"readOnly,omitempty"`
}

type SecurityContext struct {
	RunAsNonRoot             *bool           `json:"runAsNonRoot,omitempty"`
	RunAsUser                *int64          `json:"runAsUser,omitempty"`
	AllowPrivilegeEscalation *bool           `json:"allowPrivilegeEscalation"`
	Privileged               *bool           `json:"privileged,omitempty"`
	Capabilities             *Capabilities   `json:"capabilities,omitempty"`
	ReadOnlyRootFilesystem   *bool           `json:"readOnlyRootFilesystem,omitempty"`
	SeccompProfile           *SeccompProfile `json:"seccompProfile,omitempty"`
}

type Capabilities struct {
	Add  []string `json:"add,omitempty"`
	Drop []string `json:"drop"`
}

type Volume struct {
	Name                  string           `json:"name"`
	ConfigMap             *ConfigMapVolume `json:"configMap,omitempty"`
	Secret                *SecretVolume    `json:"secret,omitempty"`
	EmptyDir              *EmptyDirVolume  `json:"emptyDir,omitempty"`
	PersistentVolumeClaim *ClaimVolume     `json:"persistentVolumeClaim,omitempty"`
	HostPath              *HostPathVolume  `json:"hostPath,omitempty"`
}

type ConfigMapVolume struct {
	Name string `json:"name"`
}

type SecretVolume struct {
	SecretName  string `json:"secretName"`
	DefaultMode *int32 `json:"defaultMode,omitempty"`
}

type EmptyDirVolume struct {
	Medium string `json:"medium,omitempty"`
}

type ClaimVolume struct {
	ClaimName string `json:"claimName"`
}

type HostPathVolume struct {
	Path string `json:"path"`
	Type string `json:"type"`
}

// NetworkPolicy confines a pod's traffic: the cluster's stand-in for the
// session network's lack of a route.
type NetworkPolicy struct {
	typeMeta `json:",inline"`
	Metadata Meta              `json:"metadata"`
	Spec     NetworkPolicySpec `json:"spec"`
}

func (n NetworkPolicy) meta() Meta { return n.Metadata }

type NetworkPolicySpec struct {
	PodSelector LabelSelector `json:"podSelector"`
	PolicyTypes []string      `json:"policyTypes"`
	// Ingress and Egress are lists even when empty: an empty list denies
	// all, a missing one says nothing in YAML a reader can see.
	Ingress []PolicyRule `json:"ingress"`
	Egress  []PolicyRule `json:"egress"`
}

// PolicyRule is an ingress rule (From) or an egress rule (To).
type PolicyRule struct {
	From  []PolicyPeer `json:"from,omitempty"`
	To    []PolicyPeer `json:"to,omitempty"`
	Ports []PolicyPort `json:"ports,omitempty"`
}

type PolicyPeer struct {
	PodSelector       *LabelSelector `json:"podSelector,omitempty"`
	NamespaceSelector *LabelSelector `json:"namespaceSelector,omitempty"`
	IPBlock           *IPBlock       `json:"ipBlock,omitempty"`
}

type LabelSelector struct {
	MatchLabels map[string]string `json:"matchLabels"`
}

type IPBlock struct {
	CIDR   string   `json:"cidr"`
	Except []string `json:"except,omitempty"`
}

type PolicyPort struct {
	Protocol string `json:"protocol"`
	Port     int    `json:"port"`
}
