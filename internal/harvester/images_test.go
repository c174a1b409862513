package harvester

import (
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/butlerdotdev/butler-provider-harvester/api/reasons"
	"github.com/butlerdotdev/butler-provider-harvester/internal/errkind"
)

func TestBuildVirtualMachineImage(t *testing.T) {
	u := BuildVirtualMachineImage(ImageSpec{Ref: ObjectRef{Namespace: "default", Name: "talos"}, URL: "https://f/x.qcow2", Requester: "butler-system/is"})
	if u.GroupVersionKind() != VirtualMachineImageGVK || u.GetNamespace() != "default" || u.GetName() != "talos" {
		t.Fatalf("object %v %s/%s", u.GroupVersionKind(), u.GetNamespace(), u.GetName())
	}
	spec, _, _ := unstructured.NestedStringMap(u.Object, "spec")
	if spec["sourceType"] != "download" || spec["url"] != "https://f/x.qcow2" || spec["displayName"] != "talos" {
		t.Fatalf("spec %v", spec)
	}
	if u.GetLabels()[LabelAppManagedBy] != "butler" || u.GetLabels()[LabelManagedBy] != ManagedByValue || u.GetAnnotations()[AnnotationImageSync] != "butler-system/is" {
		t.Fatalf("labels %v annotations %v", u.GetLabels(), u.GetAnnotations())
	}
}

func imageWith(conds ...map[string]any) *unstructured.Unstructured {
	u := BuildVirtualMachineImage(ImageSpec{Ref: ObjectRef{Namespace: "default", Name: "talos"}})
	list := make([]any, len(conds))
	for i, c := range conds {
		list[i] = c
	}
	_ = unstructured.SetNestedSlice(u.Object, list, "status", "conditions")
	return u
}

func c(t, s, reason, msg string) map[string]any {
	return map[string]any{"type": t, "status": s, "reason": reason, "message": msg}
}

// Harvester's import states (pkg/image/common/operator.go) and what an ImageSync makes of them.
func TestImportStateOf(t *testing.T) {
	for name, tc := range map[string]struct {
		image    *unstructured.Unstructured
		imported bool
		failure  string
		message  string
	}{
		"new":       {imageWith(), false, "", "Harvester is downloading"},
		"importing": {imageWith(c("Initialized", "True", "Initialized", ""), c("Imported", "Unknown", "Importing", "")), false, "", "Harvester is downloading"},
		"retrying": {imageWith(c("Initialized", "True", "Initialized", ""), c("Imported", "Unknown", "Importing", ""),
			c("RetryLimitExceeded", "False", "", "retry attempted 1/3 failed due to error: no route to host")), false, "", "retries after a failure: retry attempted 1/3"},
		"imported": {imageWith(c("Initialized", "True", "", ""), c("Imported", "True", "Imported", "")), true, "", "is imported"},
		"gave up": {imageWith(c("Initialized", "True", "", ""), c("Imported", "False", "Importing", "retry attempted 3/3 ..."),
			c("RetryLimitExceeded", "True", "", "retry attempted 3/3 failed due to error: no route to host")), false, reasons.HarvesterRetryLimitExceeded, "no route to host"},
		"init gave up": {imageWith(c("Initialized", "False", "", "no backing image"), c("RetryLimitExceeded", "True", "", "retry attempted 3/3 failed due to error: storage class")),
			false, reasons.HarvesterInitFailed, "storage class"},
		"upload failed": {imageWith(c("Imported", "False", "UploadFailed", "connection closed")), false, reasons.HarvesterImportFailed, "UploadFailed"},
	} {
		t.Run(name, func(t *testing.T) {
			got := importStateOf(tc.image)
			failure := ""
			if p, ok := errkind.AsPermanent(got.Failure); ok {
				failure = p.Reason
				got.Message = p.Message
			} else if got.Failure != nil {
				t.Fatalf("failure %v is not permanent", got.Failure)
			}
			if got.Imported != tc.imported || failure != tc.failure || !strings.Contains(got.Message, tc.message) {
				t.Fatalf("imported %v, failure %q, message %q", got.Imported, failure, got.Message)
			}
		})
	}
}
